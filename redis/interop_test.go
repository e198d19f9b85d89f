package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// TestInteropRedislock: bsm/redislock holders and ours exclude each other on
// LockKey, and a waiter of ours is granted after redislock's release (which
// publishes nothing): it polls (see fleet_test.go for the timing).
func TestInteropRedislock(t *testing.T) {
	prefix := testPrefix(t)
	key := LockKey(prefix, "n")
	rl := redislock.New(newClient(t, srv.Addr()))
	l := locker(t, srv.Addr(), Config{Prefix: prefix})
	ctx := tctx(t, 20*time.Second)

	theirs, err := rl.Obtain(ctx, key, time.Second, nil)
	require.NoError(t, err)
	_, err = l.TryAcquire(ctx, "n")
	require.ErrorIs(t, err, backend.ErrNotAcquired, "redislock holds the key")
	ch := goAcquire(ctx, l, "n")
	requireBlocked(t, ch, 200*time.Millisecond)
	require.NoError(t, theirs.Release(ctx))
	r := waitAcquired(t, ch, 5*time.Second)
	require.NoError(t, r.Err)

	_, err = rl.Obtain(ctx, key, time.Second, nil)
	require.ErrorIs(t, err, redislock.ErrNotObtained, "we hold the key")
	release(t, r.Lease)
	theirs, err = rl.Obtain(ctx, key, time.Second, nil)
	require.NoError(t, err, "free again after our release")
	require.NoError(t, theirs.Release(ctx))
}

// TestInteropRedsync: the same with redsync on one pool.
func TestInteropRedsync(t *testing.T) {
	prefix := testPrefix(t)
	key := LockKey(prefix, "n")
	rs := redsync.New(rsgoredis.NewPool(newClient(t, srv.Addr())))
	l := locker(t, srv.Addr(), Config{Prefix: prefix})
	ctx := tctx(t, 20*time.Second)

	m := rs.NewMutex(key, redsync.WithExpiry(time.Second), redsync.WithTries(1))
	require.NoError(t, m.LockContext(ctx))
	_, err := l.TryAcquire(ctx, "n")
	require.ErrorIs(t, err, backend.ErrNotAcquired, "redsync holds the key")
	ch := goAcquire(ctx, l, "n")
	requireBlocked(t, ch, 200*time.Millisecond)
	ok, err := m.UnlockContext(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	r := waitAcquired(t, ch, 5*time.Second)
	require.NoError(t, r.Err)

	m2 := rs.NewMutex(key, redsync.WithExpiry(time.Second), redsync.WithTries(1))
	err = m2.LockContext(ctx)
	var taken *redsync.ErrTaken
	require.True(t, errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed), "we hold the key: %v", err)
	release(t, r.Lease)
	require.NoError(t, m2.LockContext(ctx), "free again after our release")
	_, _ = m2.UnlockContext(ctx)
}
