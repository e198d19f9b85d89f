package driver

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/fencing"
)

// Driver is one adapter's connection to its backend. It must be safe for
// concurrent use. Every call returns soon after its ctx ends, even when the
// client it uses does not heed contexts (go-zookeeper; go-redis without
// ContextTimeoutEnabled): the driver bounds such calls itself.
//
// Whether a lock is held is told by ErrNotAcquired alone, which a driver
// returns only when the backend said so. A request that could not be sent
// or got no answer (connection refused or reset, a timeout, a session that
// is only suspended) returns an error wrapping ErrUnavailable; a refusal for
// lack of permission wraps ErrPermission. A driver that cannot tell is
// never taken to mean "held".
type Driver interface {
	// Capabilities declares the backend's limits and defaults. Package
	// backend reads it when the Locker is created; it must not change.
	Capabilities() Capabilities
	// CheckTTL reports why the backend cannot honour ttl (already at least
	// Capabilities().MinTTL), or nil: its TTLLimits' Check (etcd counts
	// whole seconds, Redis, PostgreSQL and ZooKeeper whole milliseconds),
	// and whatever else the driver knows without asking. It sends nothing.
	CheckTTL(ttl time.Duration) error
	// NewLease prepares one acquisition: whatever the backend needs to keep
	// alive while waiting and holding (an etcd lease, a ZooKeeper session).
	// started is when the request that started the lease's expiry clock was
	// sent (for a lease reused from a pool, the send time of its last
	// renewal), or, for a backend whose lock key carries its own expiry
	// (Redis), when the acquisition began, so that a waiter's renewals
	// start at once; zero if no clock runs yet.
	NewLease(ctx context.Context, req Request) (lease Lease, started time.Time, err error)
	// Inspect tells who holds and who waits for the lock called name.
	// Inspect, Revoke and RevokeID return an error matching
	// errors.ErrUnsupported if the backend cannot do it.
	Inspect(ctx context.Context, name string) (Status, error)
	// Revoke ends the acquisition of lock name granted (or queued) with
	// token, as an expiry would; found is false if there was none.
	Revoke(ctx context.Context, name string, token fencing.Token) (found bool, err error)
	// RevokeID is Revoke by the acquisition's Entry.ID.
	RevokeID(ctx context.Context, name, id string) (found bool, err error)
	// Shutdown releases the driver's resources (and the client it was
	// opened with, if it owns it). backend calls it once, after releasing
	// every lease. Whatever it asks the backend (etcd: revoking idle
	// leases) is bounded by ctx; once ctx ends it closes what it owns and
	// returns soon after (within about 100ms).
	Shutdown(ctx context.Context) error
}

// Capabilities is what a Driver declares about its backend.
type Capabilities struct {
	// Name is the backend's name, as its URL scheme is spelled ("etcd",
	// "zookeeper", "redis", "postgres", "mem"): package backend reports it
	// as the fencelock.backend attribute of its metrics and spans.
	Name string
	// MinTTL is the shortest TTL the backend honours (TTLLimits.Min);
	// backend rejects shorter ones with ErrInvalidOption before calling
	// the driver.
	MinTTL time.Duration
	// DefaultServerMinTTL, if more than MinTTL, is the shortest TTL a
	// server with default settings honours (TTLLimits.ServerDefaultMin):
	// Locker.AdviseTTL advises no less. Zero if it is MinTTL.
	DefaultServerMinTTL time.Duration
	// DefaultTTL, if not zero, replaces backend.DefaultTTL as the Locker's
	// default TTL: a TTL the driver was configured with (ZooKeeper: the
	// session timeout the server granted). Options still override it.
	DefaultTTL time.Duration
	// LockDelay: the driver honours Request.LockDelay. backend refuses a
	// lock-delay (WithLockDelay) with ErrInvalidOption on a driver that
	// does not.
	LockDelay bool
}

// Request is one acquisition as backend hands it to a Driver. Name is
// already validated; the driver maps it to a key that cannot escape its
// prefix.
type Request struct {
	// Name is the lock's name.
	Name string
	// TTL is the lease's TTL, already checked against
	// Capabilities().MinTTL and CheckTTL.
	TTL time.Duration
	// Holder is the holder identity to store with the lock (WithHolder's,
	// or hostname:pid), for Inspect to report as Entry.Holder.
	Holder string
	// Metadata are the key/value pairs to store beside Holder
	// (WithMetadata's), for Inspect to report as Entry.Metadata; nil if
	// none.
	Metadata map[string]string
	// Value is nil for a lock. For an election candidate (backend.WithValue)
	// it is the value to store in place of Holder and Metadata (both empty
	// then), as it is: the raw data of the lock key or node where the
	// backend stores bytes (so that another library's candidates read it,
	// etcd's concurrency.Election for one). Inspect reports it as
	// Entry.Value, and Lease.Proclaim replaces it.
	Value *string
	// LockDelay, if positive, is the acquisition's lock-delay
	// (backend.WithLockDelay), given only to a driver whose Capabilities
	// declare LockDelay: once granted, if the lease ends otherwise than by
	// a Release with lost false (it expires, its session ends, or it is
	// released after a loss; where the backend can tell, it is revoked or
	// its key deleted), nobody is
	// granted the lock called Name, through any Locker of the driver's
	// scheme, until at least LockDelay has passed after that end (the
	// backend may count it from the lease's last possible expiry, or, as
	// ZooKeeper does, from when the next grantee saw the end); it ends on
	// its own (it never needs a Release), each adapter documenting its
	// bound. A Release with lost false lifts it at once.
	// Zero: none.
	LockDelay time.Duration
	// Lost is how the driver reports that the backend observed the lease
	// or the lock key gone (revoked, expired, deleted, the session ended),
	// with the cause: an error wrapping the sentinel of what it saw
	// (ErrRevoked, ErrExpired, ErrDeleted, ErrSessionLost), as every loss
	// error of a driver does, for the Locker's error, metric label and log
	// line; backend fires the loss signal with an error matching
	// ErrLeaseLost and the cause, and cancels a Lock in flight. It is never
	// nil, may be called from any goroutine, any number of times (the first
	// call counts), and returns at once.
	Lost func(cause error)
}

// Grant is a successful Lock.
type Grant struct {
	// Token is the fencing token of the grant.
	Token fencing.Token
	// Sent is the send time of the request that restarted the lease's
	// expiry clock while locking (Redis: the lock script), or zero if
	// locking did not touch it.
	Sent time.Time
}

// Lease is one acquisition in a backend, from NewLease to Release.
// KeepAlive may run concurrently with itself (a Refresh beside a background
// renewal), with Lock (renewal while waiting) and with Release (a renewal
// in flight when the holder releases; it must do no harm). backend
// serializes the rest, calls Lock once, and calls Release only after Lock
// has returned, until it succeeds (or returns ErrLeaseLost) once; never
// again after that.
type Lease interface {
	// Lock takes the lock. With wait it queues and blocks until granted or
	// ctx is done. Then it returns ctx's error (wrapped or not), and wraps
	// ErrNotAcquired too if and only if the backend had queued the
	// acquisition (answered its request to wait). Without wait it returns
	// an error wrapping ErrNotAcquired at once if the lock is held. A lease
	// found gone while waiting returns an error wrapping ErrLeaseLost (or
	// reports it through Request.Lost, which ends ctx), never a grant.
	Lock(ctx context.Context, wait bool) (Grant, error)
	// KeepAlive extends the lease by its TTL counted from sent, the time
	// the renewing request was sent: every lock key and queue entry of the
	// acquisition then expires no sooner than sent + TTL. One that cannot
	// say so (Redis: the first attempt is unanswered, so a key it may have
	// written cannot be named) returns an error instead. A lease that no
	// longer exists returns an error wrapping ErrLeaseLost; backend retries
	// any other error until the loss deadline.
	KeepAlive(ctx context.Context) (sent time.Time, err error)
	// Release removes this acquisition's lock key, queue entry or both,
	// only if they are still this acquisition's (never a newer holder's),
	// and ends or recycles the lease. It is called after a successful Lock,
	// after a failed or cancelled one (to remove a waiting key), and again
	// after a failure. If the lock had been taken but its key is already
	// gone, it returns an error wrapping ErrLeaseLost. lost is true when
	// the lease was lost before (backend cleaning up after a loss): a
	// lock-delay (Request.LockDelay) then stays in force; false for the
	// holder's own release, which lifts it.
	Release(ctx context.Context, lost bool) error
	// Suspended reports whether the lease's connection to the backend is
	// down now while the lease may still be alive on the server (ZooKeeper:
	// a disconnected session lives on until its timeout), and returns a
	// channel closed at the next change of that state. A backend that does
	// not track this returns false and a nil channel.
	Suspended() (suspended bool, changed <-chan struct{})
	// Proclaim replaces the value stored with the acquisition (its
	// Request.Value) while it holds the lock, without changing its token:
	// only if the lock is still this acquisition's, else it returns an
	// error wrapping ErrLeaseLost and stores nothing. backend calls it only
	// on a lease requested with a Value, after a successful Lock and before
	// Release, one at a time (KeepAlive may run beside it). A Proclaim that
	// got no answer may or may not have been stored: the caller asks again.
	Proclaim(ctx context.Context, value string) error
}
