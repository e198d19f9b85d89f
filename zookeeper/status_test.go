package zookeeper

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
)

func TestStatusAndRevoke(t *testing.T) {
	prefix := testPrefix(t)
	holder := dialLocker(t, srv.Addr(), prefix, suiteTTL, backend.WithHolder("worker-a"))
	waiter := dialLocker(t, srv.Addr(), prefix, suiteTTL, backend.WithHolder("worker-b"))
	admin := dialLocker(t, srv.Addr(), prefix, suiteTTL)
	ctx := tctx(t, 30*time.Second)

	st, err := admin.Status(ctx, "job")
	require.NoError(t, err)
	assert.Nil(t, st.Holder)

	ls, err := holder.Acquire(ctx, "job", backend.WithMetadata(map[string]string{"run": "7"}))
	require.NoError(t, err)
	granted := make(chan *backend.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "job")
		assert.NoError(t, err)
		granted <- l
	}()
	require.Eventually(t, func() bool {
		st, err = admin.Status(ctx, "job")
		return err == nil && len(st.Waiters) == 1
	}, 10*time.Second, 20*time.Millisecond)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "worker-a", st.Holder.Holder)
	assert.Equal(t, map[string]string{"run": "7"}, st.Holder.Metadata)
	assert.Equal(t, ls.Token(), st.Holder.Token)
	assert.Equal(t, "worker-b", st.Waiters[0].Holder)
	assert.Greater(t, st.Waiters[0].Token, ls.Token())

	found, err := admin.Revoke(ctx, "job", ls.Token()+1_000_000)
	require.NoError(t, err)
	assert.False(t, found)
	found, err = admin.Revoke(ctx, "job", ls.Token())
	require.NoError(t, err)
	assert.True(t, found)
	select {
	case l := <-granted:
		require.NotNil(t, l)
		assert.Greater(t, l.Token(), ls.Token())
		require.NoError(t, l.Release(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the revoked lock")
	}
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked holder was not told")
	}
	assert.ErrorIs(t, ls.Release(ctx), backend.ErrLeaseLost)
}

func TestRevokeID(t *testing.T) {
	prefix := testPrefix(t)
	l := func() *backend.Locker { return dialLocker(t, srv.Addr(), prefix, suiteTTL) }
	admin := l()
	locktest.RevokeID(t, l(), admin, [2]*backend.Locker{l(), l()}, "job", 2*time.Second, 5*time.Second)

	ctx := tctx(t, 10*time.Second)
	found, err := admin.RevokeID(ctx, "job", "_c_0123456789abcdef0123456789abcdef-lock-9999999999")
	require.NoError(t, err)
	assert.False(t, found, "no such node")
	for _, id := range []string{"x", "lock-", "lock-1x", "a/lock-1", "../x/lock-1"} {
		_, err := admin.RevokeID(ctx, "job", id)
		assert.ErrorIs(t, err, backend.ErrInvalidOption, "id %q", id)
	}
}
