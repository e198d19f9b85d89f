// Package fencing is the resource side of fencelock: the check that rejects
// writes carrying a stale fencing token.
//
// A lease-based lock can be lost without its holder noticing (a GC pause, a
// stopped process, a slow network): the lease expires, another client is
// granted the lock, and the old holder wakes up and writes. No lock service
// can prevent that. What does is a fencing token: every grant carries a Token
// that is strictly greater than all earlier grants of the same lock, the
// holder sends it with every write, and the resource remembers the highest
// token it accepted and rejects anything lower.
//
// The check must be atomic with the write it protects: a check made before
// the write and separately from it lets a stale write through. A guard that
// keeps the highest token in a store (sqlfence, redisfence, etcdfence,
// filefence) is a StoreGuard[S]: its Do hands the write function the
// store's handle S (a *sql.Tx, a *redisfence.Batch, an *etcdfence.Txn, an
// io.Writer), and what the function does through that handle is checked,
// written and recorded as one step. That atomicity is in the type: a write
// function that does not take the handle cannot write through it.
//
// Guard is the store-agnostic form, whose write function gets no handle:
// Memory, for state in the same process, and every StoreGuard's Gate method,
// for code that does not know the store (httpfence.Middleware, Admit).
//
// Every StoreGuard has the same shape: New(store, opts ...Option) (*Guard,
// error), Do, Admit, Gate and Highest; fencing/fencetest is the suite they
// all pass.
//
// # Telemetry
//
// Every guard reports what it decides through the OpenTelemetry API when it
// is given a Telemetry: fencing.WithTelemetry for Memory, the WithTelemetry
// option of sqlfence, redisfence, etcdfence, filefence and httpfence, and
// sqlfence.WithLeaseTelemetry for a LeaseGuard. Each Do adds one to the
// counter fencelock.guard.decisions and records its time in the histogram
// fencelock.guard.duration (seconds), both with the attributes
// fencelock.guard.decision and fencelock.guard.kind (memory, sql,
// sql_lease, redis, etcd, file, http), and runs in a span
// "fencelock.guard.do" carrying fencelock.token, the decision and, when Do
// fails, its error; the write function runs in that span. The decision is
// accepted when the token was admitted and the write committed, stale when
// the error matches ErrStaleToken (a newer token was admitted; for a
// LeaseGuard also a lease that ended, sqlfence.ErrLeaseEnded), and error
// for anything else: the write function's error, an unreachable store, a
// failed commit, an invalid token (DecisionOf). Resource names become the
// attribute fencelock.guard.resource only with Telemetry.ResourceNames, to
// keep the number of series bounded. Telemetry is off by default: a guard
// without providers starts no span, records nothing and allocates nothing
// more per Do. Only the API is imported; the SDK and exporters are the
// application's choice.
//
// This package does not depend on any lock client: a storage service that
// only checks tokens imports fencing and nothing heavier.
package fencing
