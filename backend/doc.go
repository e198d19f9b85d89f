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
// errors (ErrNotAcquired, ErrLeaseLost with its cause: ErrExpired,
// ErrRevoked, ErrDeleted, ErrSessionLost, ErrDeadline or ErrMaxHold,
// ErrReleased, ErrClosed, ErrInvalidName,
// ErrInvalidOption, ErrInvalidURL); test with errors.Is. An
// unreachable or unresponsive backend gives ErrUnavailable, never
// ErrNotAcquired (which means the lock is held), and a refused request
// ErrPermission; the client's own error is kept in the chain for errors.Is
// and errors.As. Other client errors are returned wrapped, matching none
// of them.
//
// # Telemetry
//
// A Locker records nothing and logs nothing by default, at no cost: no
// goroutine and no allocation on the lock path. Its options turn on, through
// the OpenTelemetry API (the SDK and exporters are the application's
// choice), metrics (WithMeterProvider), spans (WithTracerProvider) and
// log/slog lines (WithLogger); pass otel.GetMeterProvider() and
// otel.GetTracerProvider() for the global providers. The metrics, all with
// the attribute fencelock.backend ("etcd", "zookeeper", "redis",
// "postgres", "mem"), and fencelock.lock.name only with
// WithLockNameAttribute(true):
//
//   - fencelock.acquire.duration (histogram, s): by fencelock.acquire.result
//     (granted, not_acquired, cancelled, error) and fencelock.acquire.wait
//     (true for Acquire, false for TryAcquire)
//   - fencelock.hold.duration (histogram, s): from grant to release or loss
//   - fencelock.renewals (counter): background renewals, held or waiting, by
//     fencelock.renewal.result (ok, failed, lost)
//   - fencelock.renewal.headroom (histogram, s): time left before the local
//     deadline when a renewal succeeded
//   - fencelock.losses (counter): held leases lost, by fencelock.loss.cause,
//     each the cause of the lease's error: expired (ErrExpired), revoked
//     (ErrRevoked), deleted (ErrDeleted), session_lost (ErrSessionLost),
//     deadline (ErrDeadline: no renewal answered by the local deadline),
//     max_hold (ErrMaxHold), backend (a driver that named no cause; never
//     the built-in ones), closed (Locker.Close released it)
//   - fencelock.leases.held and fencelock.waiters (up-down counters): leases
//     held now, and Acquire calls in the backend's wait now
//
// The spans are "fencelock.acquire" (events "queued", when the request to
// wait is sent, and "granted"; the attribute fencelock.token once granted)
// and "fencelock.release", children of the span in the caller's context;
// an error is recorded on the span, whose status is Error unless the lock
// was merely held or the wait given up. The log lines are a lost lease
// (Warn, with its cause as fencelock.loss.cause), a failed renewal that
// will be retried (Info; never once the loss was logged) and a suspended or
// resumed connection (Info, where the backend reports it: ZooKeeper), with
// the lock name and token.
//
// Every Locker also keeps the hold times of the names it grants, in bounded
// memory, whether telemetry is on or not: Locker.HoldTimes returns their
// percentiles, and Locker.AdviseTTL recommends a TTL from them that the
// backend takes.
package backend
