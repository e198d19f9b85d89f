// Package backend is the contract fencelock users program against: a Locker
// that acquires named locks, and the Lease it returns, with its fencing
// token, its loss signal and its local deadline.
//
// Open a Locker from configuration by URL, after importing the adapter that
// registers the scheme:
//
//	import _ "github.com/fencelock/fencelock/etcd"
//
//	locker, err := backend.Open(ctx, "etcd://10.0.0.1:2379/locks?ttl=10s")
//	lease, err := locker.Acquire(ctx, "nightly-report")
//	defer lease.Release(context.Background())
//	err = store.Write(lease.Context(), data, lease.Token()) // the store checks the token
//
// This package owns what is the same for every backend: name and option
// validation, renewal (every TTL/3 by default), the early loss deadline,
// retries of failed renewals, cleanup after a failed or cancelled
// acquisition, and error mapping. Adapters implement the small contract of
// package backend/driver, which users never import; see the etcd,
// zookeeper, redis, postgres and backend/mem packages.
//
// Every error about the lock itself wraps one of the package's sentinel
// errors (ErrNotAcquired, ErrLeaseLost, with ErrMaxHold when the max hold
// ended the lease, ErrReleased, ErrClosed, ErrInvalidName,
// ErrInvalidOption, ErrInvalidURL); test with errors.Is. An
// unreachable or unresponsive backend gives ErrUnavailable, never
// ErrNotAcquired (which means the lock is held), and a refused request
// ErrPermission; the client's own error is kept in the chain for errors.Is
// and errors.As. Other client errors are returned wrapped, matching none
// of them.
package backend
