package redis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
)

func TestStatusAndRevoke(t *testing.T) {
	cfg := Config{Prefix: testPrefix(t)}
	holder := locker(t, srv.Addr(), cfg, backend.WithTTL(5*time.Second))
	admin := locker(t, srv.Addr(), cfg)
	ctx := tctx(t, 20*time.Second)

	st, err := admin.Status(ctx, "job")
	require.NoError(t, err)
	assert.Nil(t, st.Holder, "a free lock has no holder")

	ls, err := holder.Acquire(ctx, "job")
	require.NoError(t, err)
	st, err = admin.Status(ctx, "job")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, ls.Token(), st.Holder.Token)
	assert.Greater(t, st.Holder.TTLLeft, time.Duration(0))
	assert.LessOrEqual(t, st.Holder.TTLLeft, 5*time.Second)

	found, err := admin.Revoke(ctx, "job", ls.Token()+1)
	require.NoError(t, err)
	assert.False(t, found, "another token must not revoke the holder")
	waiter := goAcquire(ctx, admin, "job")
	found, err = admin.Revoke(ctx, "job", ls.Token())
	require.NoError(t, err)
	assert.True(t, found)
	select {
	case r := <-waiter: // woken by the revoke's notice, not by the TTL
		require.NoError(t, r.Err)
		assert.Greater(t, r.Lease.Token(), ls.Token())
		require.NoError(t, r.Lease.Release(ctx))
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter was not granted the revoked lock promptly")
	}
	select {
	case <-ls.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked holder was not told")
	}
	assert.ErrorIs(t, ls.Release(ctx), backend.ErrLeaseLost)
}

func TestRevokeID(t *testing.T) {
	cfg := Config{Prefix: testPrefix(t)}
	// A waiter that fails within 1s was woken by the revoke: not by its
	// renewal (every 10s), nor by its fallback timer (the lock key's 6s).
	// The holder learns at its next renewal (every 2s), as from any lost key.
	long := backend.WithTTL(30 * time.Second)
	admin := locker(t, srv.Addr(), cfg)
	locktest.RevokeID(t, locker(t, srv.Addr(), cfg, backend.WithTTL(6*time.Second)), admin,
		[2]*backend.Locker{locker(t, srv.Addr(), cfg, long), locker(t, srv.Addr(), cfg, long)}, "job", time.Second, 3*time.Second)

	ctx := tctx(t, 10*time.Second)
	found, err := admin.RevokeID(ctx, "job", "no-such-owner")
	require.NoError(t, err)
	assert.False(t, found)

	// A key another library wrote shows its value as its ID.
	raw := newClient(t, srv.Addr())
	key := keysOf(cfg.Prefix, "foreign").lock
	require.NoError(t, raw.Set(ctx, key, "c29tZSB0b2tlbg==", time.Minute).Err())
	st, err := admin.Status(ctx, "foreign")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "c29tZSB0b2tlbg==", st.Holder.ID)
	found, err = admin.RevokeID(ctx, "foreign", st.Holder.ID)
	require.NoError(t, err)
	assert.True(t, found)
	n, err := raw.Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestRevokeIDPromisedWaiter: revoking the waiter a free lock is promised
// to hands the lock to the next one at once.
func TestRevokeIDPromisedWaiter(t *testing.T) {
	prefix := testPrefix(t)
	l := locker(t, srv.Addr(), Config{Prefix: prefix})
	ctx := tctx(t, 20*time.Second)
	k := keysOf(prefix, "n")
	raw := newClient(t, srv.Addr())
	queueSlowWaiter(ctx, t, raw, k, 20*time.Second)
	ch := goAcquire(ctx, l, "n", backend.WithTTL(30*time.Second))
	require.Eventually(t, func() bool {
		st, err := l.Status(ctx, "n")
		return err == nil && len(st.Waiters) == 2
	}, 10*time.Second, 10*time.Millisecond)
	start := time.Now()
	found, err := l.RevokeID(ctx, "n", "slow")
	require.NoError(t, err)
	require.True(t, found)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	assert.Less(t, time.Since(start), time.Second, "granted by the revoke, not by a timer")
	release(t, r.Lease)
}
