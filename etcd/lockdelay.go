package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
)

// An acquisition with a lock-delay (driver.Request.LockDelay) puts its key
// with a second lease, the key lease, whose TTL is the acquisition's TTL
// plus the delay plus a second (it is renewed just after the acquisition's
// own lease, whose expiry ends the holder's term: the key lease's comes at
// least the delay later). The holder's release deletes the key as any
// release does, and revokes the key lease; when the acquisition's lease
// expires or is revoked, or the holder is released after a loss, its key
// stays until the key lease expires: the lock stays held, for every client
// that follows the etcd recipe (the oldest key holds), for the delay. A
// revocation of the key itself (fencelock revoke, Locker.Revoke) revokes
// the key lease, which frees the lock at once.

// keyLeaseTTL is the TTL in seconds of the key lease of an acquisition
// with a TTL of ttl seconds and a lock-delay of delay (rounded up to whole
// seconds).
func keyLeaseTTL(ttl int64, delay time.Duration) int64 {
	return ttl + int64((delay+time.Second-1)/time.Second) + 1
}

// keyLeaseOf is the lease l's key is put with when its own lease is id.
func (l *lease) keyLeaseOf(id clientv3.LeaseID) clientv3.LeaseID {
	if l.keyLease != 0 {
		return l.keyLease
	}
	return id
}

// grantKeyLease grants l's key lease, for a lock-delay of delay.
func (l *lease) grantKeyLease(ctx context.Context, delay time.Duration) error {
	id, _, err := l.d.grant(ctx, keyLeaseTTL(l.ttl, delay))
	if err != nil {
		return fmt.Errorf("etcd: the lock-delay's key lease: %w", err)
	}
	l.keyLease = id
	return nil
}

// keepKeyLease renews l's key lease, if it has one. One found gone has
// taken l's key with it: the lease is lost.
func (l *lease) keepKeyLease(ctx context.Context) error {
	if l.keyLease == 0 {
		return nil
	}
	if _, err := l.d.client.KeepAliveOnce(ctx, l.keyLease); err != nil {
		if isLeaseNotFound(err) {
			// Renewed with the lease, it cannot have expired first.
			return fmt.Errorf("%w: etcd key lease %x not found", backend.ErrRevoked, int64(l.keyLease))
		}
		return fmt.Errorf("etcd: keepalive key lease %x: %w", int64(l.keyLease), l.d.mapErr(err))
	}
	return nil
}
