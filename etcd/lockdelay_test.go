package etcd

import (
	"fmt"
	"strings"
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

// TestLockDelayHolderLeaseRevoked: when the holder's own lease (not its
// key lease) is revoked, the holder learns of the loss at its next
// renewal, and its clean-up leaves its key to the key lease: the lock is
// held for everyone until that expires, TTL + delay + 1s after the last
// renewal, then granted.
func TestLockDelayHolderLeaseRevoked(t *testing.T) {
	prefix := testPrefix(t)
	admin := client(t)
	const ttl = 3 * time.Second
	a := locker(t, prefix, backend.WithTTL(ttl))
	b := locker(t, prefix, backend.WithTTL(ttl))
	ctx := tctx(t, time.Minute)
	ls, err := a.TryAcquire(ctx, "n", backend.WithLockDelay(time.Second))
	require.NoError(t, err)
	resp, err := admin.Get(ctx, nameDir(prefix, "n"), clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	key := string(resp.Kvs[0].Key)
	// The key is named after the holder's own lease, and put with the
	// key lease.
	own := leaseIDOf(t, key)
	require.NotEqual(t, int64(own), resp.Kvs[0].Lease)
	ttlResp, err := admin.TimeToLive(ctx, own, clientv3.WithAttachedKeys())
	require.NoError(t, err)
	require.EqualValues(t, 3, ttlResp.GrantedTTL)
	require.Empty(t, ttlResp.Keys)
	_, err = admin.Revoke(ctx, own)
	require.NoError(t, err)
	select {
	case <-ls.Done():
	case <-time.After(2 * ttl):
		t.Fatal("no loss signal")
	}
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
	_, err = b.TryAcquire(ctx, "n")
	require.ErrorIs(t, err, backend.ErrNotAcquired, "the lost holder's key stays for the lock-delay")
	lb, err := b.Acquire(ctx, "n")
	require.NoError(t, err)
	require.NoError(t, lb.Release(ctx))
}

// leaseIDOf is the lease id in the name of a lock key (<dir><lease hex>).
func leaseIDOf(t *testing.T, key string) clientv3.LeaseID {
	var id int64
	_, err := fmt.Sscanf(key[strings.LastIndexByte(key, '/')+1:], "%x", &id)
	require.NoError(t, err)
	return clientv3.LeaseID(id)
}
