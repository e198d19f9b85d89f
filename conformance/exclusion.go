package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// testMutualExclusion runs contenders on one name, and checks every critical
// section: it writes through a fencing guard (which must never see a token
// lower than one it admitted), counts overlaps, and records its hold for the
// overlapping-term checker (kubernetes#67651).
func (s *suite) testMutualExclusion(t *testing.T) {
	// Blocking Acquire loops back to back, two of them sharing one Locker
	// (etcd#11360).
	t.Run("Acquire", func(t *testing.T) {
		a, b, c := s.locker(t), s.locker(t), s.locker(t)
		holds := s.contend(t, []*backend.Locker{a, b, c, a}, nil, 25, 0)
		require.Len(t, holds["acquirer"], 100)
	})
	// Blocking loops that pause between rounds, and TryAcquire pollers that
	// take the lock when it is free.
	t.Run("Mixed", func(t *testing.T) {
		a, b := s.locker(t), s.locker(t)
		holds := s.contend(t, []*backend.Locker{a, b}, []*backend.Locker{b, s.locker(t)}, 40, 3*time.Millisecond)
		require.Len(t, holds["acquirer"], 80)
		assert.NotEmpty(t, holds["poller"], "no TryAcquire succeeded while the lock was free between rounds")
	})
}

// contend runs a blocking Acquire loop of rounds grants per acquirer, each
// pausing up to pause between rounds, and TryAcquire pollers until the
// acquirers are done. It checks the history and returns the holds by kind.
func (s *suite) contend(t *testing.T, acquirers, pollers []*backend.Locker, rounds int, pause time.Duration) map[string][]holdRecord {
	k := newSections(lockName(t))
	c := ctx(t, 2*time.Minute)
	var acq sync.WaitGroup
	for i, l := range acquirers {
		who := fmt.Sprintf("acquirer%d", i)
		acq.Go(func() { k.acquirer(c, l, who, rounds, pause) })
	}
	stop := make(chan struct{})
	var pol sync.WaitGroup
	for i, l := range pollers {
		who := fmt.Sprintf("poller%d", i)
		pol.Go(func() { k.poller(c, l, who, pause, stop) })
	}
	acq.Wait()
	close(stop)
	pol.Wait()

	require.Empty(t, k.errs)
	assert.Zero(t, k.overlaps.Load(), "critical sections overlapped")
	holds := k.hist.snapshot()
	assert.Empty(t, checkHistory(holds), "hold history (%d holds)", len(holds))
	byKind := map[string][]holdRecord{}
	for _, h := range holds {
		kind := strings.TrimRight(h.who, "0123456789")
		byKind[kind] = append(byKind[kind], h)
	}
	t.Logf("%d holds by acquirers, %d by pollers", len(byKind["acquirer"]), len(byKind["poller"]))
	return byKind
}

// acquirer is one of contend's blocking loops: rounds times, it acquires
// the lock through l, runs a critical section, and pauses up to pause.
func (k *sections) acquirer(c context.Context, l *backend.Locker, who string, rounds int, pause time.Duration) {
	for range rounds {
		ls, err := l.Acquire(c, k.name)
		if err != nil {
			k.fail("%s: Acquire: %v", who, err)
			return
		}
		k.critical(who, ls)
		sleepUpTo(pause)
	}
}

// poller is one of contend's TryAcquire pollers: until stop closes, it
// tries the lock through l (again after up to pause/4 if it is held) and
// runs a critical section when it gets it, then pauses up to pause.
func (k *sections) poller(c context.Context, l *backend.Locker, who string, pause time.Duration, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		ls, err := l.TryAcquire(c, k.name)
		switch {
		case errors.Is(err, backend.ErrNotAcquired):
			sleepUpTo(pause / 4)
		case err != nil:
			k.fail("%s: TryAcquire: %v", who, err)
			return
		default:
			k.critical(who, ls)
			sleepUpTo(pause)
		}
	}
}

// critical is a critical section held with ls: two guarded writes, a
// check that the lease still holds (the long TTL), and its Release.
func (k *sections) critical(who string, ls *backend.Lease) {
	start := k.enter()
	k.write(context.Background(), who, "with token", ls.Token())
	if err := ls.Err(); err != nil {
		k.fail("%s: lease lost inside the critical section (long TTL): %v", who, err)
	}
	k.leave(who, ls.Token(), start)
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ls.Release(rctx); err != nil {
		k.fail("%s: Release: %v", who, err)
	}
}

// sleepUpTo sleeps a random time below d (not at all if d is not
// positive).
func sleepUpTo(d time.Duration) {
	if d > 0 {
		time.Sleep(time.Duration(rand.Int64N(int64(d))))
	}
}

// testSameLockerTwoHandles: two acquisitions of one name through one Locker
// exclude each other and get different tokens (etcd#11360).
func (s *suite) testSameLockerTwoHandles(t *testing.T) {
	name := lockName(t)
	l := s.locker(t)
	first := s.try(t, l, name)
	s.requireHeld(t, l, name, "a second TryAcquire through the same Locker must fail")

	ch := goAcquire(t, ctx(t, s.long), l, name)
	requireWaiting(t, ch, s.settle, "second Acquire through the holder's Locker")
	release(t, first)
	r := wait(t, ch, s.prompt, "second Acquire after the first handle was released")
	require.NoError(t, r.err)
	assert.Greater(t, r.lease.Token(), first.Token())
	release(t, r.lease)
}

// testIndependentNames: different names never block each other, including
// names an adapter could confuse when it maps them to keys or paths: path
// separators and dot segments are not interpreted, escapes do not collide
// with what they escape, a name is not a prefix range, and names are
// compared byte for byte (no case folding, no Unicode normalization).
func (s *suite) testIndependentNames(t *testing.T) {
	a, b := s.locker(t), s.locker(t)

	t.Run("Concurrent", func(t *testing.T) {
		base := lockName(t)
		la := s.acquire(t, a, base+"x", s.prompt)
		lb := s.acquire(t, b, base+"y", s.prompt)
		s.requireHeld(t, b, base+"x")
		s.requireHeld(t, a, base+"y")
		release(t, la)
		release(t, lb)
	})

	for _, p := range []struct{ label, x, y string }{
		{"PathPrefix", "a", "a/b"},
		{"StringPrefix", "a", "ab"},
		{"TrailingSlash", "a", "a/"},
		{"DoubleSlash", "a/b", "a//b"},
		{"DotDot", "b", "a/../b"},
		{"Dot", "a/b", "a/./b"},
		{"EscapedSlash", "a/b", "a%2Fb"},
		{"EscapedSlashLower", "a/b", "a%2fb"},
		{"EscapedPercent", "%", "%25"},
		{"Case", "a", "A"},
		{"TrailingSpace", "a", "a "},
		{"Backslash", "a/b", `a\b`},
		{"Normalization", "é", "e\u0301"}, // precomposed vs decomposed
		{"Unicode", "日本", "日本/語"},
	} {
		t.Run(p.label, func(t *testing.T) {
			base := lockName(t) + "/"
			x, y := base+p.x, base+p.y
			for _, order := range [][2]string{{x, y}, {y, x}} {
				first := s.try(t, a, order[0])
				second, err := b.TryAcquire(ctx(t, s.prompt), order[1])
				hold(t, second)
				require.NoError(t, err, "holding %q must not block %q", order[0], order[1])
				s.requireHeld(t, b, order[0], "%q must still be held", order[0])
				release(t, second)
				release(t, first)
			}
		})
	}

	t.Run("MaxLenName", func(t *testing.T) {
		base := lockName(t)
		x := base + strings.Repeat("x", backend.MaxNameLen-len(base))
		y := x[:len(x)-1] + "y"
		require.Len(t, x, backend.MaxNameLen)
		lx := s.try(t, a, x)
		ly := s.try(t, b, y)
		s.requireHeld(t, b, x)
		release(t, lx)
		release(t, ly)
	})
}

// testFIFO: waiters are granted in the order they started waiting.
func (s *suite) testFIFO(t *testing.T) {
	if !s.caps.FIFO {
		t.Skip("backend does not promise FIFO")
	}
	const waiters = 4
	name := lockName(t)
	observer := s.locker(t)
	holder := s.try(t, observer, name)

	c := ctx(t, s.long)
	granted := make(chan int, waiters)
	tokens := make([]fencing.Token, waiters)
	chs := make([]chan result, waiters)
	for i := range waiters {
		chs[i] = goAcquire(t, c, s.locker(t), name)
		// Waiter i is queued before waiter i+1 starts: Status lists it.
		// A fixed settle time alone was not enough on a loaded machine
		// (waiters 1 and 2 swapped on a Docker etcd).
		requireWaiting(t, chs[i], s.settle, fmt.Sprintf("waiter %d", i))
		s.requireQueued(t, observer, name, i+1)
	}
	for i := range waiters {
		go func() {
			r := <-chs[i]
			chs[i] <- r
			if r.err == nil {
				tokens[i] = r.lease.Token()
				granted <- i
				_ = r.lease.Release(context.Background())
			} else {
				granted <- -1 - i
			}
		}()
	}
	release(t, holder)

	var order []int
	for range waiters {
		select {
		case i := <-granted:
			if i < 0 {
				r := <-chs[-1-i]
				require.FailNow(t, "waiter failed", "waiter %d: %v", -1-i, r.err)
			}
			order = append(order, i)
		case <-time.After(s.prompt):
			require.FailNow(t, "waiters not granted in time", "granted so far: %v", order)
		}
	}
	assert.Equal(t, []int{0, 1, 2, 3}, order, "grant order")
	for i := 1; i < waiters; i++ {
		assert.Greater(t, tokens[order[i]], tokens[order[i-1]], "tokens in grant order")
	}
}

// longQueue is how many waiters LongQueueFIFO queues on one lock.
const longQueue = 100

// testLongQueueFIFO: a long queue, spread over a few Lockers as a handful
// of replicas would be, drains in the order the backend queued it (a
// release wakes its successor, not a herd that races for the lock).
func (s *suite) testLongQueueFIFO(t *testing.T) {
	if !s.caps.FIFO {
		t.Skip("backend does not promise FIFO")
	}
	lockers := make([]*backend.Locker, 4)
	for i := range lockers {
		lockers[i] = s.locker(t)
	}
	// The case checks order, not speed: its bound is against a hang only.
	// A race-built embedded etcd on a starved machine (the first minutes
	// of a CI run, compiling beside it) took over 30s (s.long) for the
	// hundred enqueues and handoffs, each a few round trips.
	d, err := lockbench.DrainQueue(ctx(t, 4*s.long), lockers, lockName(t), longQueue)
	require.NoError(t, err)
	assert.Zero(t, d.OutOfOrder, "grants out of queue order, of %d", longQueue)
	t.Logf("%d waiters drained in %v: handoff p50 %v, p99 %v", d.Waiters, d.Elapsed,
		lockbench.Percentile(d.Handoffs, 0.5), lockbench.Percentile(d.Handoffs, 0.99))
}
