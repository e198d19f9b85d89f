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
	// with, if it owns it). Locker calls it once, after releasing every
	// lease, unless the driver implements Shutdowner. It must not hang on an
	// unreachable backend: whatever it asks the backend is bounded (a few
	// seconds at most).
	Close() error
}

// Shutdowner is implemented by a Driver whose Close asks the backend for
// something (etcd: revoking its idle leases), so that Locker.Shutdown can
// bound it. Locker calls Shutdown instead of Close.
type Shutdowner interface {
	// Shutdown is Close bounded by ctx: once ctx ends it stops asking the
	// backend, closes what it owns and returns soon after (within about
	// 100ms).
	Shutdown(ctx context.Context) error
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

// Errors of a Driver and its DriverLeases. Whether the lock is held is told
// by ErrNotAcquired alone, which a driver returns only when the backend said
// so (or, for a wait given up, had queued the acquisition behind a holder).
// A request that could not be sent or got no answer (connection refused or
// reset, a timeout, no server, a session that is only suspended) returns an
// error wrapping ErrUnavailable and the client's error; a refusal for lack
// of permission wraps ErrPermission. Locker also reports an acquisition
// whose ctx ended without a driver's ErrNotAcquired as ErrUnavailable: the
// backend did not answer in time. So a driver that cannot tell is never
// taken to mean "held".
//
// Every call returns soon after its ctx ends, even when the client it uses
// does not heed contexts (go-zookeeper; go-redis without
// ContextTimeoutEnabled): the driver bounds such calls itself. Locker fires
// the loss signal at the local deadline from a timer of its own, without
// waiting for a KeepAlive in flight.

// DriverLease is one acquisition in a backend, from NewLease to Release.
// KeepAlive may run concurrently with itself (a Refresh beside a background
// renewal), with Lock (renewal while waiting) and with Release (a renewal in
// flight when the holder releases; it must do no harm). Locker serializes the
// rest, and calls Release only after Lock has returned.
type DriverLease interface {
	// Lock takes the lock. With wait it queues and blocks until granted or
	// ctx is done. Then it returns ctx's error (wrapped or not), and wraps
	// ErrNotAcquired too if and only if the backend had queued the
	// acquisition (answered its request to wait); an error that ended a
	// wait before the backend answered does not, and Locker reports it as
	// ErrUnavailable. Without wait it returns an error wrapping
	// ErrNotAcquired at once if the lock is held.
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
