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
// The check must be atomic with the write it protects. A Guard runs the check,
// the write and the record of the new highest token as one step; a check made
// before the write and separately from it lets a stale write through.
//
// This package does not depend on any lock client: a storage service that
// only checks tokens imports fencing and nothing heavier.
package fencing
