package etcd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
)

// TestLockDelayKeyLease: the key of an acquisition with a lock-delay is on
// a lease of its own that outlives the acquisition's by the delay (and a
// second); the holder's release revokes it, leaving no lease behind, and
// the lock is free at once; an acquisition without a lock-delay puts its
// key with its own lease, as before.
func TestLockDelayKeyLease(t *testing.T) {
	prefix := testPrefix(t)
	admin := client(t)
	l := locker(t, prefix, backend.WithTTL(2*time.Second))
	ctx := tctx(t, 30*time.Second)
	keyLease := func(name string) clientv3.LeaseID {
		resp, err := admin.Get(ctx, nameDir(prefix, name), clientv3.WithPrefix())
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		return clientv3.LeaseID(resp.Kvs[0].Lease)
	}

	ls, err := l.TryAcquire(ctx, "delayed", backend.WithLockDelay(1500*time.Millisecond))
	require.NoError(t, err)
	id := keyLease("delayed")
	ttl, err := admin.TimeToLive(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 2+2+1, ttl.GrantedTTL, "TTL + the delay in whole seconds, rounded up, + 1s")
	require.NoError(t, ls.Release(ctx))
	require.Eventually(t, func() bool {
		ttl, err := admin.TimeToLive(ctx, id)
		return err == nil && ttl.TTL == -1
	}, 10*time.Second, 10*time.Millisecond, "the key lease is revoked by the release")
	lb, err := l.TryAcquire(ctx, "delayed")
	require.NoError(t, err, "a released lock is free at once")
	ttl, err = admin.TimeToLive(ctx, keyLease("delayed"))
	require.NoError(t, err)
	require.EqualValues(t, 2, ttl.GrantedTTL, "without a lock-delay the key is on the acquisition's lease")
	require.NoError(t, lb.Release(ctx))
}
