package redis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
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
