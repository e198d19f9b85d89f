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
// # Lost answers
//
// A guard that talks to its store over a network can lose the answer to a
// write that was applied: the connection drops, or times out, after the
// request went through. No guard reports such a write as stale: Do returns
// nil when it learns that the write landed, and otherwise an
// *OutcomeUnknownError (errors.Is(err, ErrOutcomeUnknown)): the write may
// have landed, and the caller finds out by reading the resource back. A
// *StaleTokenError means that the write did not land.
//
//   - redisfence: each Do's script carries a random call id, recorded with
//     the write it applies for a while (redisfence.WithReplayWindow); a
//     client that sends the script again after a lost answer (go-redis
//     does: MaxRetries) gets the first run's result, with any client
//     configuration.
//   - etcdfence: the etcd client resends no transaction once sent; a lost
//     answer is ErrOutcomeUnknown.
//   - sqlfence: a COMMIT whose answer is lost is ErrOutcomeUnknown; every
//     other failure rolled the transaction back.
//   - httpfence: a guard's ErrOutcomeUnknown is answered as such (500,
//     Fencing-Outcome: unknown); a fenced request with an Idempotency-Key
//     sent again gets the first answer (kept in the handler's memory); on
//     the client, httpfence.Result makes a request that got no answer
//     ErrOutcomeUnknown.
//   - filefence: a directory fsync that fails after the rename is
//     ErrOutcomeUnknown (the new content is in place, but may not survive a
//     crash).
//   - Memory: in the same process, no answer is lost.
//
// fencing/fencetest's LostAnswer checks it on every guard that talks over
// a network, with real servers: a proxy lets the write through and drops
// its answer while a newer token is admitted.
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
// LeaseGuard also a lease that ended, sqlfence.ErrLeaseEnded), unknown
// when the error matches ErrOutcomeUnknown (the write's answer was lost:
// it may have landed), and error for anything else: the write function's
// error, a store that refused the write, a failed commit, an invalid token
// (DecisionOf). Resource names become the
// attribute fencelock.guard.resource only with Telemetry.ResourceNames, to
// keep the number of series bounded. Telemetry is off by default: a guard
// without providers starts no span, records nothing and allocates nothing
// more per Do. Only the API is imported; the SDK and exporters are the
// application's choice.
//
// This package does not depend on any lock client: a storage service that
// only checks tokens imports fencing and nothing heavier.
package fencing
