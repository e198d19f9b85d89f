package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// waiterPool is the Lockers the waiters of a drain share: a few pools, as
// a handful of replicas would have, with their drivers for the wake-up
// and attempt counts.
type waiterPool struct {
	lockers []*backend.Locker
	drivers []*pgDriver
}

func newWaiterPool(tb testing.TB, dsn, prefix string, n int) *waiterPool {
	p := &waiterPool{}
	for range n {
		d, err := newDriver(newPool(tb, dsn), Config{Prefix: prefix}, nil)
		require.NoError(tb, err)
		l, err := backend.New(d, backend.WithTTL(lockbench.HeldTTL))
		require.NoError(tb, err)
		tb.Cleanup(func() { _ = l.Close() })
		p.lockers, p.drivers = append(p.lockers, l), append(p.drivers, d)
	}
	return p
}

// wakeups returns the grant notifications delivered to waiters.
func (p *waiterPool) wakeups() int64 {
	var n int64
	for _, d := range p.drivers {
		n += d.wakeups.Load()
	}
	return n
}

// attempts returns the acquire statements the drivers sent.
func (p *waiterPool) attempts() int64 {
	var n int64
	for _, d := range p.drivers {
		n += d.attempts.Load()
	}
	return n
}

// TestThousandWaitersFIFO queues 1,000 waiters on one lock over four
// Lockers and checks that they are granted in the order the server queued
// them, each woken once, by the notification of its predecessor's
// release, and that no waiter sent an acquire statement beyond its first
// and one after its Locker's listener came up. Under the race detector it
// queues 200.
func TestThousandWaitersFIFO(t *testing.T) {
	n := 1000
	if raceDetector {
		n = 200
	}
	p := newWaiterPool(t, srv.NewDatabase(t), testPrefix(t), 4)
	lockbench.RequireFIFO(t, p.lockers, "queue", n)
	if w := p.wakeups(); w != int64(n) {
		t.Errorf("%d wake-ups for %d releases, want one each", w, n)
	}
	if a, most := p.attempts(), int64(2*n+1); a > most {
		t.Errorf("%d acquire statements for %d waiters, want at most %d", a, n, most)
	}
}

// One release wakes exactly one waiter: six waiters over two Lockers, the
// holder releases, the first waiter is granted by one notification, and
// nobody else is woken or sends anything (the others stay queued).
func TestOneWakeupPerRelease(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	holder := locker(t, dsn, Config{Prefix: prefix})
	p := newWaiterPool(t, dsn, prefix, 2)
	ctx := tctx(t, 60*time.Second)
	ls, err := holder.TryAcquire(ctx, "n")
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var chans []<-chan acquiredResult
	for i := range 6 {
		chans = append(chans, goAcquire(wctx, p.lockers[i%2], "n"))
		require.Eventually(t, func() bool {
			st, err := holder.Status(ctx, "n")
			return err == nil && len(st.Waiters) == i+1
		}, 10*time.Second, 5*time.Millisecond)
	}
	// Let every waiter's listener come up and its retry after that run.
	require.Eventually(t, func() bool {
		for _, d := range p.drivers {
			if !d.hub.listening() {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	wakeups, attempts := p.wakeups(), p.attempts()

	release(t, ls)
	r := waitAcquired(t, chans[0], 5*time.Second)
	require.NoError(t, r.Err)
	require.Greater(t, r.Lease.Token(), ls.Token())
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, wakeups+1, p.wakeups(), "notifications delivered for one release")
	require.Equal(t, attempts, p.attempts(), "acquire statements sent after the release")
	for _, ch := range chans[1:] {
		requireBlocked(t, ch, 0)
	}
	st, err := holder.Status(ctx, "n")
	require.NoError(t, err)
	require.Len(t, st.Waiters, 5)
	release(t, r.Lease)
	cancel()
}

// benchDrain drains n waiters on a database of their own and reports the
// drain, the handoffs in round trips (a SELECT 1) and the wake-ups per
// release.
func benchDrain(b *testing.B, n int) {
	dsn := srv.NewDatabase(b)
	p := newWaiterPool(b, dsn, testPrefix(b), 4)
	st := measureRoundTrips(b, newPool(b, dsn))
	for b.Loop() {
		before := p.wakeups()
		d := lockbench.BenchDrain(b, p.lockers, n)
		st.Report(b, d.Handoffs)
		b.ReportMetric(float64(p.wakeups()-before)/float64(n), "wakeups/release")
	}
}

// BenchmarkDrain200 reports how 200 waiters on one lock drain: the total
// time, the handoff p50 and p99 (also in round trips), and the waiters
// woken per release. One drain is one op: run it with -benchtime 1x.
func BenchmarkDrain200(b *testing.B) { benchDrain(b, 200) }

// BenchmarkDrain1000 is BenchmarkDrain200 with 1,000 waiters.
func BenchmarkDrain1000(b *testing.B) { benchDrain(b, 1000) }
