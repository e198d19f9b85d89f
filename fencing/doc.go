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
// This package does not depend on any lock client: a storage service that
// only checks tokens imports fencing and nothing heavier.
package fencing
