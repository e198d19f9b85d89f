package etcd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
)

func TestStatusListsHolderAndQueue(t *testing.T) {
	pfx := testPrefix(t)
	a := locker(t, pfx, backend.WithHolder("worker-a"), backend.WithTTL(10*time.Second))
	b := locker(t, pfx, backend.WithHolder("worker-b"))
	ctx := tctx(t, 20*time.Second)

	st, err := a.Status(ctx, "job")
	require.NoError(t, err)
	assert.Nil(t, st.Holder)

	held, err := a.Acquire(ctx, "job", backend.WithMetadata(map[string]string{"run": "42"}))
	require.NoError(t, err)
	// A concurrency.Mutex waiter queues behind us and shows with no holder name.
	sess, err := concurrency.NewSession(client(t), concurrency.WithTTL(10))
	require.NoError(t, err)
	defer sess.Close()
	mutexDone := make(chan error, 1)
	m := concurrency.NewMutex(sess, pfx+"/job")
	go func() { mutexDone <- m.Lock(ctx) }()
	require.Eventually(t, func() bool { return len(keys(t, client(t), pfx, "job")) == 2 }, 10*time.Second, 10*time.Millisecond)

	st, err = b.Status(ctx, "job")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "worker-a", st.Holder.Holder)
	assert.Equal(t, map[string]string{"run": "42"}, st.Holder.Metadata)
	assert.Equal(t, held.Token(), st.Holder.Token)
	assert.Greater(t, st.Holder.TTLLeft, time.Duration(0))
	assert.LessOrEqual(t, st.Holder.TTLLeft, 10*time.Second)
	require.Len(t, st.Waiters, 1)
	assert.Equal(t, "", st.Waiters[0].Holder)
	assert.Greater(t, st.Waiters[0].Token, held.Token())

	release(t, held)
	require.NoError(t, <-mutexDone)
	require.NoError(t, m.Unlock(ctx))
}

func TestRevokeID(t *testing.T) {
	pfx := testPrefix(t)
	admin := locker(t, pfx)
	locktest.RevokeID(t, locker(t, pfx, backend.WithTTL(long)), admin,
		[2]*backend.Locker{locker(t, pfx, backend.WithTTL(long)), locker(t, pfx, backend.WithTTL(long))}, "job", 2*time.Second, 5*time.Second)
	ctx := tctx(t, 20*time.Second)

	// A Locker reuses its idle leases, and so its keys: the id of an
	// acquisition that ended never names a later one with the same key.
	l := locker(t, pfx, backend.WithTTL(long))
	first, err := l.Acquire(ctx, "again")
	require.NoError(t, err)
	st, err := admin.Status(ctx, "again")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	old, key := st.Holder.ID, keyOf(t, client(t), pfx, first).Key
	release(t, first)
	second, err := l.Acquire(ctx, "again")
	require.NoError(t, err)
	require.Equal(t, string(key), string(keyOf(t, client(t), pfx, second).Key), "the pooled lease's key is written again")
	found, err := admin.RevokeID(ctx, "again", old)
	require.NoError(t, err)
	assert.False(t, found, "the id of an ended acquisition")
	require.NoError(t, second.Err())
	release(t, second)

	dir := nameDir(pfx, "again")
	for _, id := range []string{"x", dir + "1", dir + "1@", dir + "1@x", dir + "1@0", dir + "@5", dir + "a/b@5",
		nameDir(pfx, "other") + "1@5", pfx + "/1@5"} {
		_, err := admin.RevokeID(ctx, "again", id)
		assert.ErrorIs(t, err, backend.ErrInvalidOption, "id %q", id)
	}
}
