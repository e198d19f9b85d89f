package redis

import (
	"context"
	"runtime"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
)

// Bounds of TestNoContextTimeoutPartitioned, for a loaded two-core CI
// machine with the race detector on: nominally a timer's latency (loss)
// and the 100ms clean-up grace of a failed acquisition (return); both far
// below go-redis's 3s default read timeout, which is what a client without
// ContextTimeoutEnabled waits for on a partitioned connection.
const (
	noCtxLossLate = 100 * time.Millisecond
	noCtxReturn   = 500 * time.Millisecond
)

// A Locker over a go-redis client without ContextTimeoutEnabled (go-redis's
// default, as in the package documentation's Sentinel example), cut off by
// a partition: its requests hang for the client's read timeout whatever
// their context. Still, the holder's loss signal fires at its local
// deadline and before another Locker is granted the lock; TryAcquire
// returns ErrUnavailable, and Release and Shutdown return, soon after
// their contexts end; and nothing is left running once the client is
// closed.
func TestNoContextTimeoutPartitioned(t *testing.T) {
	before := runtime.NumGoroutine()
	p, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	defer p.Close()
	c := goredis.NewClient(&goredis.Options{Addr: p.Addr()})
	defer c.Close()
	require.False(t, c.Options().ContextTimeoutEnabled)
	prefix := testPrefix(t)
	a, err := New(c, Config{Prefix: prefix})
	require.NoError(t, err)
	defer a.Close()
	b := locker(t, srv.Addr(), Config{Prefix: prefix})

	la := noCtxLostBeforeGranted(t, p, a, b)
	noCtxCallsReturn(t, a, la)

	p.Heal()
	require.NoError(t, c.Close())
	p.Close()
	require.NoError(t, b.Close())
	for end := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			buf := make([]byte, 1<<20)
			require.FailNowf(t, "goroutines left behind", "were %d, now:\n%s", before, buf[:runtime.Stack(buf, true)])
		}
	}
}

// noCtxLostBeforeGranted has a (behind proxy p) take lock "l", partitions
// p, and requires that a's lease, returned, signals its loss at its local
// deadline (noCtxLossLate at most after it), before b, waiting, is granted
// the lock.
func noCtxLostBeforeGranted(t *testing.T, p *faultproxy.Proxy, a, b *backend.Locker) *backend.Lease {
	const ttl = 500 * time.Millisecond
	la, err := a.TryAcquire(tctx(t, 5*time.Second), "l", backend.WithTTL(ttl), backend.WithDriftMargin(ttl/10))
	require.NoError(t, err)
	lost := make(chan time.Time, 1)
	go func() {
		<-la.Done()
		lost <- time.Now()
	}()

	p.Partition()
	type granted struct {
		ls *backend.Lease
		at time.Time
	}
	chB := make(chan granted, 1)
	go func() {
		ls, err := b.Acquire(tctx(t, 10*time.Second), "l")
		assert.NoError(t, err)
		chB <- granted{ls, time.Now()}
	}()
	var lostAt time.Time
	select {
	case lostAt = <-lost:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no loss signal within 5s")
	}
	late := lostAt.Sub(la.Deadline())
	t.Logf("loss signal %v after the local deadline: %v", late, la.Err())
	require.ErrorIs(t, la.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, la.Err(), backend.ErrDeadline, "the loss names its cause")
	assert.GreaterOrEqual(t, late, time.Duration(0))
	assert.Less(t, late, noCtxLossLate, "the loss signal waited for the hung renewal")
	var g granted
	select {
	case g = <-chB:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the waiter was not granted within 5s")
	}
	require.NotNil(t, g.ls)
	assert.Greater(t, g.ls.Token(), la.Token())
	assert.True(t, lostAt.Before(g.at), "granted %v before the old holder's loss signal", lostAt.Sub(g.at))
	require.NoError(t, g.ls.Release(tctx(t, 5*time.Second)))
	return la
}

// noCtxCallsReturn requires that, through the partition, a's TryAcquire
// and Acquire fail with ErrUnavailable, and the release of its lost lease
// la and its Shutdown return, within noCtxReturn after their contexts end.
func noCtxCallsReturn(t *testing.T, a *backend.Locker, la *backend.Lease) {
	const bound = 200 * time.Millisecond
	var err error
	for _, wait := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		start := time.Now()
		var ls *backend.Lease
		if wait {
			ls, err = a.Acquire(ctx, "other")
		} else {
			ls, err = a.TryAcquire(ctx, "other")
		}
		took := time.Since(start)
		cancel()
		t.Logf("wait %v through the partition: %v after %v", wait, err, took)
		require.Nil(t, ls)
		require.ErrorIs(t, err, backend.ErrUnavailable)
		require.NotErrorIs(t, err, backend.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, took, bound+noCtxReturn)
	}

	ctx, cancel := context.WithTimeout(context.Background(), bound)
	start := time.Now()
	_ = la.Release(ctx)
	cancel()
	assert.Less(t, time.Since(start), bound+noCtxReturn, "Release")

	ctx, cancel = context.WithTimeout(context.Background(), bound)
	start = time.Now()
	err = a.Shutdown(ctx)
	cancel()
	took := time.Since(start)
	t.Logf("Shutdown: %v after %v", err, took)
	assert.Less(t, took, bound+noCtxReturn, "Shutdown")
}
