package backend

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/fencing"
)

// Driver is what a backend adapter implements. Users never call it: they use
// Locker, which owns validation, renewal, the loss deadline, retries and error
// mapping, so that adapters stay thin.
//
// A Driver must be safe for concurrent use.
type Driver interface {
	// MinTTL is the shortest TTL the backend honours; Locker rejects shorter
	// ones with ErrInvalidOption before calling the driver.
	MinTTL() time.Duration
	// NewLease prepares one acquisition: whatever the backend needs to keep
	// alive while waiting and holding (an etcd lease, a ZooKeeper session).
	// started is when the request that started the lease's expiry clock was
	// sent (for a lease reused from a pool, the send time of its last
	// renewal); zero if no clock runs yet (the lock key itself will carry the
	// expiry, as in Redis). Errors: ErrInvalidOption for a TTL the server
	// will not honour, ErrClosed, or a backend error.
	NewLease(ctx context.Context, req Request) (lease DriverLease, started time.Time, err error)
	// Close releases the driver's resources (and the client it was opened
	// with, if it owns it). Locker calls it once, after releasing every lease.
	Close() error
}

// TTLChecker is implemented by a Driver whose backend has rules for TTLs
// beyond MinTTL (etcd: whole seconds), so that New, Open and Acquire reject a
// TTL it cannot honour before any request is sent. Locker wraps the error in
// ErrInvalidOption.
type TTLChecker interface {
	CheckTTL(ttl time.Duration) error
}

// Request is one acquisition as Locker hands it to a Driver. Name is already
// validated; the driver maps it to a key that cannot escape its prefix.
type Request struct {
	Name     string
	TTL      time.Duration
	Holder   string
	Metadata map[string]string
}

// DriverLease is one acquisition in a backend, from NewLease to Release.
// KeepAlive may run concurrently with itself (a Refresh beside a background
// renewal), with Lock (renewal while waiting) and with Release (a renewal in
// flight when the holder releases; it must do no harm). Locker serializes the
// rest, and calls Release only after Lock has returned.
type DriverLease interface {
	// Lock takes the lock. With wait it queues and blocks until granted or
	// ctx is done (then it returns ctx's error, wrapped or not); without wait
	// it returns an error wrapping ErrNotAcquired at once if the lock is held.
	// A lease found gone while waiting returns an error wrapping
	// ErrLeaseLost, never a grant. restarted is the send time of the request
	// that restarted the lease's expiry clock while locking (Redis: the lock
	// script), or zero if locking did not touch it.
	Lock(ctx context.Context, wait bool) (token fencing.Token, restarted time.Time, err error)
	// KeepAlive extends the lease by its TTL counted from the time the
	// request is sent. A lease that no longer exists returns an error
	// wrapping ErrLeaseLost; any other error is retried by Locker until the
	// loss deadline.
	KeepAlive(ctx context.Context) error
	// Release removes this acquisition's lock key, queue entry or both, only
	// if they are still this acquisition's (never a newer holder's), and ends
	// or recycles the lease. It is called after a successful Lock, after a
	// failed or cancelled one (to remove a waiting key), and again after a
	// failure; it must be idempotent. If the lock had been taken (Lock
	// returned a token) but its key is already gone, it returns an error
	// wrapping ErrLeaseLost.
	Release(ctx context.Context) error
	// Lost is closed when the backend observes that the lease or the lock key
	// is gone (revoked, expired, deleted). It may be nil if the backend only
	// learns this from KeepAlive.
	Lost() <-chan struct{}
}
