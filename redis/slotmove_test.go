package redis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/redistest"
)

// The lock's hash slot moved to another master of a Redis Cluster while the
// lock is held or waited for, in the steps redis-cli --cluster reshard
// takes (CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE, SETSLOT NODE):
// on one cluster, each case with a lock (so a slot) of its own, at once.
// The migration stopped halfway is in the full run only (-short skips it):
// it waits out TTLs.
func TestClusterSlotMove(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1)
	cases := []struct {
		name string // the lock's name: its slot
		run  func(*testing.T, *redistest.Cluster)
		slow bool
	}{
		{"moved", slotMoved, false}, {"retried", slotRetried, false}, {"reshard", slotReshard, false},
		{"nonlocal", slotNonLocal, false}, {"halfway", slotHalfway, true},
	}
	slots := map[int]string{}
	for _, tc := range cases {
		slot, err := c.Slot(tctx(t, time.Minute), keysOf("", tc.name).lock)
		require.NoError(t, err)
		require.NotContains(t, slots, slot, "%s and %s share a slot", tc.name, slots[slot])
		slots[slot] = tc.name
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.slow && testing.Short() {
				t.Skip("-short: it waits out TTLs (the full run has it)")
			}
			t.Parallel()
			tc.run(t, c)
		})
	}
}

// slotDrift is the drift margin of the holders whose renewals these tests
// follow: a deadline past t+TTL-slotDrift is a renewal sent after t.
const slotDrift = 100 * time.Millisecond

// openLockers opens n Lockers of u, closed when t ends.
func openLockers(t *testing.T, ctx context.Context, u string, n int) []*backend.Locker {
	var ls []*backend.Locker
	for range n {
		l, err := backend.Open(ctx, u)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		ls = append(ls, l)
	}
	return ls
}

// renewedSince waits until ls's deadline says that a renewal sent after
// since succeeded (it was granted with slotDrift).
func renewedSince(t *testing.T, ls *backend.Lease, since time.Time, what string) {
	t.Helper()
	require.Eventually(t, func() bool { return ls.Deadline().After(since.Add(ls.TTL() - slotDrift)) },
		3*ls.TTL(), 10*time.Millisecond, "%s: no renewal after %v (lease: %v)", what, since, ls.Err())
	require.NoError(t, ls.Err(), what)
}

// requireSlotUnavailable requires err to say that the backend could not
// answer because the lock's slot is moving: backend.ErrUnavailable, with
// the cluster's own answer kept, never backend.ErrNotAcquired.
func requireSlotUnavailable(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	require.ErrorIs(t, err, backend.ErrUnavailable, what)
	require.NotErrorIs(t, err, backend.ErrNotAcquired, what)
	require.Regexp(t, `TRYAGAIN|ASK|MOVED`, err.Error(), what)
}

// A held lock whose slot moves to another master and back: the holder
// renews on the new master, its release works there, and the next token
// is larger; a holder whose grants wait for a replica (sent to one node in
// a pipeline) too.
func slotMoved(t *testing.T, c *redistest.Cluster) {
	ctx := tctx(t, 2*time.Minute)
	u := clusterURL(c, "prefix=mv&ttl=2s")
	ls := openLockers(t, ctx, u, 2)
	a, b := ls[0], ls[1]
	w := openLockers(t, ctx, u+"&wait_replicas=1&wait_timeout=1s", 1)[0]
	k := keysOf("mv", "moved")
	slot, err := c.Slot(ctx, k.lock)
	require.NoError(t, err)

	la, err := a.TryAcquire(ctx, "moved", backend.WithDriftMargin(slotDrift))
	require.NoError(t, err)
	from, err := c.MasterOf(ctx, k.lock)
	require.NoError(t, err)
	to, err := c.MoveSlot(ctx, slot, nil)
	require.NoError(t, err)
	moved := time.Now()
	require.NotEqual(t, from, to)
	n, err := to.NewClient(t).Exists(ctx, k.lock, k.counter).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the lock key and its counter on the new master")
	renewedSince(t, la, moved, "the holder after the move")
	_, err = b.TryAcquire(ctx, "moved")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	release(t, la)
	lb, err := b.TryAcquire(ctx, "moved")
	require.NoError(t, err)
	assert.Greater(t, lb.Token(), la.Token())
	release(t, lb)

	lw, err := w.TryAcquire(ctx, "moved", backend.WithDriftMargin(slotDrift))
	require.NoError(t, err)
	assert.Greater(t, lw.Token(), lb.Token())
	_, err = c.MoveSlot(ctx, slot, from)
	require.NoError(t, err)
	moved = time.Now()
	renewedSince(t, lw, moved, "the replica-waiting holder after the move back")
	release(t, lw)
	// Its next grant meets MOVED at the old master, and goes again to
	// the new one.
	lw2, err := w.TryAcquire(ctx, "moved")
	require.NoError(t, err)
	assert.Greater(t, lw2.Token(), lw.Token())
	release(t, lw2)
}

// A lock whose slot's migration stops halfway, its keys split between the
// two masters: every call either works or fails with ErrUnavailable (the
// cluster's TRYAGAIN or ASK kept), in time, never as "held" when it cannot
// tell; a stop shorter than the TTL costs the holder and the waiters
// nothing, a longer one costs the holder and a waiter their leases (at
// their deadlines, as any outage); once the migration finishes,
// everything works and tokens only grow.
func slotHalfway(t *testing.T, c *redistest.Cluster) {
	h := newHalfway(t, c)
	la, wb, wd := h.queue()
	lb, from := h.shortStop(la, wb, wd)
	h.longStop(lb, wd, from)

	lc, err := h.cl.Acquire(tctx(t, 2*halfwayTTL), "halfway")
	require.NoError(t, err)
	assert.Greater(t, lc.Token(), lb.Token())
	release(t, lc)
}

// halfwayTTL is the TTL of slotHalfway's Lockers.
const halfwayTTL = 4 * time.Second

// halfway is slotHalfway's lock "halfway", its slot, and the Lockers that
// take it: a holds, b and d wait, e and cl call during the stops.
type halfway struct {
	t              *testing.T
	ctx            context.Context
	c              *redistest.Cluster
	k              keys
	slot           int
	a, b, d, e, cl *backend.Locker
}

// newHalfway opens slotHalfway's Lockers and finds the lock's slot.
func newHalfway(t *testing.T, c *redistest.Cluster) *halfway {
	ctx := tctx(t, 2*time.Minute)
	ls := openLockers(t, ctx, clusterURL(c, "prefix=mig&ttl=4s"), 5)
	h := &halfway{t: t, ctx: ctx, c: c, k: keysOf("mig", "halfway"), a: ls[0], b: ls[1], d: ls[2], e: ls[3], cl: ls[4]}
	var err error
	h.slot, err = c.Slot(ctx, h.k.lock)
	require.NoError(t, err)
	return h
}

// queue has a hold the lock and b then d wait for it: the lock key, the
// counter, the queue and its expiries exist.
func (h *halfway) queue() (la *backend.Lease, wb, wd <-chan acquired) {
	t, ctx, k := h.t, h.ctx, h.k
	cc := h.c.NewClient(t)
	la, err := h.a.TryAcquire(ctx, "halfway", backend.WithDriftMargin(slotDrift))
	require.NoError(t, err)
	wb = goAcquire(ctx, h.b, "halfway", backend.WithDriftMargin(slotDrift))
	require.Eventually(t, func() bool { return cc.ZCard(ctx, k.queue).Val() == 1 }, 10*time.Second, 10*time.Millisecond)
	wd = goAcquire(ctx, h.d, "halfway")
	require.Eventually(t, func() bool { return cc.ZCard(ctx, k.queue).Val() == 2 }, 10*time.Second, 10*time.Millisecond)
	return la, wb, wd
}

// split stops a migration of the slot to master to (nil: another)
// halfway: the lock key and the queue on the target, the counter and
// the queue's expiries on the source.
func (h *halfway) split(to *redistest.Server) *redistest.Migration {
	t, ctx, k := h.t, h.ctx, h.k
	m, err := h.c.StartMigration(ctx, h.slot, to)
	require.NoError(t, err)
	keys, err := m.Remaining(ctx, 100)
	require.NoError(t, err)
	require.Subset(t, keys, []string{k.lock, k.counter, k.queue, k.expiry}, "the lock's keys")
	require.NoError(t, m.Move(ctx, k.lock, k.queue))
	left, err := m.Remaining(ctx, 100)
	require.NoError(t, err)
	require.ElementsMatch(t, slices.DeleteFunc(keys, func(s string) bool { return s == k.lock || s == k.queue }), left)
	return m
}

// duringStop requires that during a stop a renewal of holder, a
// TryAcquire and a new waiter's Acquire each fail with ErrUnavailable,
// when their contexts end at the latest.
func (h *halfway) duringStop(holder *backend.Lease) {
	calls := map[string]func(ctx context.Context) error{
		"the holder's refresh": func(ctx context.Context) error { return holder.Refresh(ctx) },
		"TryAcquire": func(ctx context.Context) error {
			_, err := h.cl.TryAcquire(ctx, "halfway")
			return err
		},
		"a new waiter's Acquire": func(ctx context.Context) error {
			_, err := h.e.Acquire(ctx, "halfway")
			return err
		},
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs = map[string]error{}
		took = map[string]time.Duration{}
	)
	for what, f := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fctx, cancel := context.WithTimeout(h.ctx, time.Second)
			defer cancel()
			start := time.Now()
			err := f(fctx)
			mu.Lock()
			errs[what], took[what] = err, time.Since(start)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for what, err := range errs {
		requireSlotUnavailable(h.t, err, what)
		require.Less(h.t, took[what], 3*time.Second, "%s returned long after its context ended", what)
	}
}

// shortStop is a stop shorter than the TTL while a holds (la) and b and d
// wait (wb, wd): the holder renews after it, the waiters still wait, and
// b gets the lock when a releases it; from is the master that served the
// slot before the stop.
func (h *halfway) shortStop(la *backend.Lease, wb, wd <-chan acquired) (lb *backend.Lease, from *redistest.Server) {
	t := h.t
	m := h.split(nil)
	stopped := time.Now()
	h.duringStop(la)
	require.NoError(t, m.Finish(h.ctx))
	t.Logf("first stop: %v with the keys split", time.Since(stopped))
	renewedSince(t, la, time.Now(), "the holder after a stop shorter than its TTL")
	requireBlocked(t, wb, 50*time.Millisecond)
	requireBlocked(t, wd, 50*time.Millisecond)
	release(t, la)
	rb := waitAcquired(t, wb, 10*time.Second)
	require.NoError(t, rb.Err, "the first waiter, after the holder's release")
	lb = rb.Lease
	assert.Greater(t, lb.Token(), la.Token())
	return lb, m.From
}

// longStop is a stop longer than the TTL, moving the slot back to from,
// with b holding (lb) and d waiting (wd): both lose their leases at their
// deadlines, their renewals' TRYAGAIN kept in the cause; nobody is told
// that the lock is held, whether it still is or not.
func (h *halfway) longStop(lb *backend.Lease, wd <-chan acquired, from *redistest.Server) {
	t, ctx, k := h.t, h.ctx, h.k
	m := h.split(from)
	stopped := time.Now()
	h.duringStop(lb)
	select {
	case <-lb.Done():
	case <-time.After(2 * halfwayTTL):
		require.Fail(t, "the holder's lease outlived its deadline without a renewal")
	}
	// (The losses match ErrUnavailable; their text names TRYAGAIN
	// unless the last renewal was cut short by the deadline within
	// go-redis's own pauses after TRYAGAIN, which then return the
	// context's error.)
	lost := lb.Err()
	require.ErrorIs(t, lost, backend.ErrLeaseLost)
	require.ErrorIs(t, lost, backend.ErrUnavailable)
	t.Logf("the holder's loss: %v", lost)
	// Its release cannot clean up: the lock key expires with its TTL.
	requireSlotUnavailable(t, lb.Release(ctx), "the lost holder's release")
	rd := waitAcquired(t, wd, 2*halfwayTTL)
	require.ErrorIs(t, rd.Err, backend.ErrLeaseLost)
	require.ErrorIs(t, rd.Err, backend.ErrUnavailable)
	t.Logf("the waiter's loss: %v", rd.Err)
	// The lock key has expired by now: the lock is free, and TryAcquire
	// cannot tell.
	target := m.To.NewClient(t)
	require.Eventually(t, func() bool {
		p := target.Pipeline()
		p.Do(ctx, "ASKING")
		n := p.Exists(ctx, k.lock)
		_, err := p.Exec(ctx)
		return err == nil && n.Val() == 0
	}, 2*halfwayTTL, 10*time.Millisecond, "the lock key on the importing master")
	_, err := h.cl.TryAcquire(ctx, "halfway")
	requireSlotUnavailable(t, err, "TryAcquire on the lock freed during the stop")
	require.NoError(t, m.Finish(ctx))
	t.Logf("second stop: %v with the keys split", time.Since(stopped))
}

// A migration that finishes while a call meets TRYAGAIN costs the call
// that time, not an error: the adapter sends the script again (within
// tryAgainWithin), where go-redis gives up after some 100ms (with TRYAGAIN,
// or with ASK or MOVED once every key has moved: the source sends it to the
// target, which answers TRYAGAIN for the keys that do not exist, then
// MOVED without ASKING; a replica-waiting grant's pipeline to the source
// gets ASK). A release while the lock key alone has moved, and a
// TryAcquire while every key has, with and without wait_replicas, and
// through a cluster client that follows no redirection (the adapter's
// tries meet ASK during the migration, then MOVED); and Status and Revoke.
func slotRetried(t *testing.T, c *redistest.Cluster) {
	ctx := tctx(t, 2*time.Minute)
	// A cluster client that follows no redirection (MaxRedirects -1)
	// leaves MOVED and ASK to the adapter.
	noRedirects := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, MaxRedirects: -1})
	t.Cleanup(func() { _ = noRedirects.Close() })
	for _, tc := range []struct {
		cfg    Config
		client Client
	}{
		{Config{Prefix: "rt"}, c.NewClient(t)},
		{Config{Prefix: "rtw", WaitReplicas: 1, WaitTimeout: time.Second}, c.NewClient(t)},
		{Config{Prefix: "rtn"}, noRedirects},
	} {
		cfg := tc.cfg
		d, err := newDriver(tc.client, cfg, nil)
		require.NoError(t, err)
		l, err := backend.New(d, backend.WithTTL(2*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		k := keysOf(cfg.Prefix, "retried")
		slot, err := c.Slot(ctx, k.lock)
		require.NoError(t, err)
		// during runs call while the slot's migration has stopped with
		// the lock key moved (all: every key of the slot, the slot not
		// given yet), and finishes the migration once the call has met
		// TRYAGAIN (or returned).
		during := func(to *redistest.Server, all bool, call func() error) (*redistest.Migration, error) {
			m, err := c.StartMigration(ctx, slot, to)
			require.NoError(t, err)
			keys := []string{k.lock}
			if all {
				keys, err = m.Remaining(ctx, 100)
				require.NoError(t, err)
			}
			require.NoError(t, m.Move(ctx, keys...))
			done := make(chan error, 1)
			before := d.tryAgains.Load()
			start := time.Now()
			go func() { done <- call() }()
			require.Eventually(t, func() bool { return d.tryAgains.Load() > before || len(done) > 0 }, 10*time.Second, time.Millisecond)
			require.NoError(t, m.Finish(ctx))
			err = <-done
			t.Logf("%s: a call during a migration took %v, %d scripts sent again", cfg.Prefix,
				time.Since(start), d.tryAgains.Load()-before)
			return m, err
		}
		la, err := l.TryAcquire(ctx, "retried")
		require.NoError(t, err)
		m, err := during(nil, false, func() error { return la.Release(ctx) })
		require.NoError(t, err, "%s: the release", cfg.Prefix)
		var lb *backend.Lease
		m, err = during(m.From, true, func() (err error) {
			lb, err = l.TryAcquire(ctx, "retried")
			return err
		})
		require.NoError(t, err, "%s: TryAcquire", cfg.Prefix)
		assert.Greater(t, lb.Token(), la.Token())
		// The status and a revocation (their own scripts).
		var st backend.Status
		m, err = during(m.From, false, func() (err error) {
			st, err = l.Status(ctx, "retried")
			return err
		})
		require.NoError(t, err, "%s: Status", cfg.Prefix)
		require.NotNil(t, st.Holder)
		assert.Equal(t, lb.Token(), st.Holder.Token)
		var found bool
		_, err = during(m.From, false, func() (err error) {
			found, err = l.Revoke(ctx, "retried", lb.Token())
			return err
		})
		require.NoError(t, err, "%s: Revoke", cfg.Prefix)
		assert.True(t, found)
		select {
		case <-lb.Done():
		case <-time.After(3 * lb.TTL()):
			require.Fail(t, "the revoked holder did not learn of it")
		}
	}
}

// A script that deletes a key of a migrating slot and then uses it again
// is stopped by the source ("Script attempted to access a non local key in
// a cluster node": the key is not there any more, so it may be on the
// target), with its writes before that applied: the adapter's scripts
// meet it when one empties the queue and reads it again. It means the
// slot is moving: ErrUnavailable, which the adapter sends again (see
// migrating).
func slotNonLocal(t *testing.T, c *redistest.Cluster) {
	ctx := tctx(t, time.Minute)
	k := keysOf("nl", "nonlocal")
	cc := c.NewClient(t)
	require.NoError(t, cc.Set(ctx, k.lock, "1", 0).Err())
	require.NoError(t, cc.Set(ctx, k.counter, "1", 0).Err())
	slot, err := c.Slot(ctx, k.lock)
	require.NoError(t, err)
	m, err := c.StartMigration(ctx, slot, nil)
	require.NoError(t, err)
	err = cc.Eval(ctx, "redis.call('DEL', KEYS[1]); return redis.call('GET', KEYS[1])", []string{k.lock, k.counter}).Err()
	require.ErrorContains(t, err, "non local key")
	assert.True(t, migrating(err))
	require.ErrorIs(t, mapErr(err), backend.ErrUnavailable)
	require.NoError(t, m.Finish(ctx))
}

// Moves at the pace of redis-cli --cluster reshard (the keys moved at once)
// while a lock is held and another Locker asks for it without pause: no
// call fails (each is refused as held), the holder renews throughout, and
// the test logs how long the moves and the slowest call took and how many
// scripts were sent again.
func slotReshard(t *testing.T, c *redistest.Cluster) {
	ctx := tctx(t, 2*time.Minute)
	const moves = 10
	holder := openLockers(t, ctx, clusterURL(c, "prefix=rs&ttl=2s"), 1)[0]
	d, err := newDriver(c.NewClient(t), Config{Prefix: "rs"}, nil)
	require.NoError(t, err)
	l, err := backend.New(d, backend.WithTTL(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	slot, err := c.Slot(ctx, keysOf("rs", "reshard").lock)
	require.NoError(t, err)
	lh, err := holder.TryAcquire(ctx, "reshard", backend.WithDriftMargin(slotDrift))
	require.NoError(t, err)

	stop := make(chan struct{})
	done := make(chan struct{})
	var (
		calls   int
		slowest time.Duration
		callErr error
	)
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			_, err := l.TryAcquire(ctx, "reshard")
			slowest = max(slowest, time.Since(start))
			calls++
			if !errors.Is(err, backend.ErrNotAcquired) {
				callErr = err
				return
			}
		}
	}()
	var longest, total time.Duration
	for range moves {
		start := time.Now()
		_, err := c.MoveSlot(ctx, slot, nil)
		require.NoError(t, err)
		took := time.Since(start)
		longest, total = max(longest, took), total+took
	}
	close(stop)
	<-done
	require.NoError(t, callErr, "a TryAcquire during the moves")
	require.NoError(t, lh.Err(), "the holder")
	renewedSince(t, lh, time.Now(), "the holder after the moves")
	t.Logf("%d slot moves (SETSLOT IMPORTING to every node agreeing): %v on average, %v the longest; "+
		"%d TryAcquire meanwhile, the slowest %v, %d scripts sent again after TRYAGAIN, ASK or MOVED",
		moves, total/moves, longest, calls, slowest, d.tryAgains.Load())
	release(t, lh)
}
