package redis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// TestLockDelayMarker: a holder with a lock-delay keeps a marker beside its
// lock key that outlives it by the delay, and its release deletes it (no
// key is left behind); when its lock key is deleted by someone else, the
// marker keeps the lock from everyone, a TryAcquire too, and the loss's
// clean-up leaves it, until it expires (within TTL + delay).
func TestLockDelayMarker(t *testing.T) {
	prefix := testPrefix(t)
	admin := newClient(t, srv.Addr())
	a := locker(t, srv.Addr(), Config{Prefix: prefix})
	b := locker(t, srv.Addr(), Config{Prefix: prefix})
	const ttl, delay = 600 * time.Millisecond, 1500 * time.Millisecond
	marker := func(name string) string { return LockKey(prefix, name) + ":delay" }

	t.Run("Released", func(t *testing.T) {
		ls, err := a.TryAcquire(tctx(t, 5*time.Second), "released", backend.WithTTL(ttl), backend.WithLockDelay(delay))
		require.NoError(t, err)
		left, err := admin.PTTL(tctx(t, 5*time.Second), marker("released")).Result()
		require.NoError(t, err)
		require.Greater(t, left, ttl, "the marker outlives the lock key")
		require.LessOrEqual(t, left, ttl+delay)
		require.NoError(t, ls.Release(tctx(t, 5*time.Second)))
		n, err := admin.Exists(tctx(t, 5*time.Second), marker("released")).Result()
		require.NoError(t, err)
		require.Zero(t, n, "a release leaves no marker")
		lb, err := b.TryAcquire(tctx(t, 5*time.Second), "released")
		require.NoError(t, err, "a released lock is free at once")
		require.NoError(t, lb.Release(tctx(t, 5*time.Second)))
	})

	t.Run("Deleted", func(t *testing.T) {
		ls, err := a.TryAcquire(tctx(t, 5*time.Second), "deleted", backend.WithTTL(ttl), backend.WithLockDelay(delay))
		require.NoError(t, err)
		deleted := time.Now()
		require.NoError(t, admin.Del(tctx(t, 5*time.Second), LockKey(prefix, "deleted")).Err())
		_, err = b.TryAcquire(tctx(t, 5*time.Second), "deleted")
		require.ErrorIs(t, err, backend.ErrNotAcquired, "a lock in its lock-delay is held for everyone")
		select {
		case <-ls.Done():
		case <-time.After(ttl + 3*time.Second):
			t.Fatal("no loss signal")
		}
		require.ErrorIs(t, ls.Release(tctx(t, 5*time.Second)), backend.ErrLeaseLost)
		n, err := admin.Exists(tctx(t, 5*time.Second), marker("deleted")).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "a release after a loss leaves the marker")
		lb, err := b.Acquire(tctx(t, ttl+delay+5*time.Second), "deleted")
		require.NoError(t, err)
		got := time.Since(deleted)
		require.NoError(t, lb.Release(tctx(t, 5*time.Second)))
		t.Logf("granted %v after the lock key was deleted (TTL %v, lock-delay %v)", got, ttl, delay)
		require.GreaterOrEqual(t, got, delay)
	})
}
