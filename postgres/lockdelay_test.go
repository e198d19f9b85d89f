package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// TestLockDelayRevoked: a holder with a lock-delay revoked by an operator
// loses the lock (it learns so at once if its Locker listens, else at its
// next renewal), and nobody is granted it (a TryAcquire finds it
// held) until the delay has passed since the revocation; a waiter queued
// meanwhile is granted it then. A holder's release frees it at once.
func TestLockDelayRevoked(t *testing.T) {
	dsn := srv.NewDatabase(t)
	prefix := testPrefix(t)
	ctx := tctx(t, time.Minute)
	a := locker(t, dsn, Config{Prefix: prefix}, backend.WithTTL(10*time.Second))
	b := locker(t, dsn, Config{Prefix: prefix}, backend.WithTTL(10*time.Second))
	const delay = 1500 * time.Millisecond

	ls, err := a.TryAcquire(ctx, "released", backend.WithLockDelay(delay))
	require.NoError(t, err)
	require.NoError(t, ls.Release(ctx))
	lb, err := b.TryAcquire(ctx, "released")
	require.NoError(t, err, "a released lock is free at once")
	require.NoError(t, lb.Release(ctx))

	ls, err = a.TryAcquire(ctx, "revoked", backend.WithLockDelay(delay))
	require.NoError(t, err)
	found, err := b.Revoke(ctx, "revoked", ls.Token())
	require.NoError(t, err)
	require.True(t, found)
	revoked := time.Now()
	_, err = b.TryAcquire(ctx, "revoked")
	require.ErrorIs(t, err, backend.ErrNotAcquired, "a lock in its lock-delay is held for everyone")
	lb, err = b.Acquire(ctx, "revoked")
	require.NoError(t, err)
	got := time.Since(revoked)
	t.Logf("granted %v after the revocation (lock-delay %v)", got, delay)
	require.GreaterOrEqual(t, got, delay)
	require.NoError(t, lb.Release(ctx))
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked holder was not told")
	}
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
}
