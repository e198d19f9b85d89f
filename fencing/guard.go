package fencing

import (
	"context"
	"errors"
	"fmt"
)

// ErrStaleToken matches (with errors.Is) every rejection of a token lower than
// the highest one already admitted for the same resource.
var ErrStaleToken = errors.New("fencing: stale token")

// StaleTokenError says which token was rejected and which one had won.
type StaleTokenError struct {
	Resource string // the guarded resource
	Token    Token  // the rejected token
	Highest  Token  // the highest token admitted so far
}

// Error says which token was rejected for which resource, and the winner.
func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fencing: stale token %d for %q: token %d was already admitted", e.Token, e.Resource, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// StoreGuard is a guard that keeps the highest token in a store and hands
// its write function the store's handle for one atomic step: a transaction
// (sqlfence: *sql.Tx), a batch of staged commands (redisfence:
// *redisfence.Batch), a staged etcd transaction (etcdfence: *etcdfence.Txn)
// or the new content of a file (filefence: io.Writer).
//
// Do calls write with that handle only if token is not lower than the
// highest token admitted for resource, and records token, together with
// everything write did through the handle, only if write returns nil: the
// check, the write and the record are one atomic step. A lower token is
// rejected with a *StaleTokenError (errors.Is(err, ErrStaleToken)); if the
// token turns stale while write runs (a guard that does not hold the
// resource meanwhile, such as redisfence and etcdfence), what write staged
// is discarded and Do still returns the *StaleTokenError. A zero token is
// rejected with ErrInvalidToken. A nil write records the token alone.
//
// Only the handle is part of the atomic step. A write that goes around it,
// through the *sql.DB or the Redis client the guard was made from, lands
// whatever the token, and is neither rolled back nor discarded when the
// token is rejected.
//
// Equal tokens are admitted: one holder writes many times under one grant,
// and a retried write carries the same token.
type StoreGuard[S any] interface {
	// Do calls write with the store's handle if token is not lower than
	// the highest admitted for resource, and records token with what write
	// did, in one atomic step, if write returns nil (see StoreGuard).
	Do(ctx context.Context, resource string, token Token, write func(ctx context.Context, s S) error) error
}

// Gate adapts a StoreGuard to a Guard, for store guards whose Gate method
// passes the write function nothing: the function runs where g's would,
// without the handle, so nothing it does is part of g's atomic step. A nil
// write admits the token alone.
func Gate[S any](g StoreGuard[S]) Guard { return gate[S]{g} }

type gate[S any] struct{ g StoreGuard[S] }

func (x gate[S]) Do(ctx context.Context, resource string, token Token, write func(ctx context.Context) error) error {
	if write == nil {
		return x.g.Do(ctx, resource, token, nil)
	}
	return x.g.Do(ctx, resource, token, func(ctx context.Context, _ S) error { return write(ctx) })
}

// Guard is the store-agnostic form of a guard, for code that does not know
// where the data lives (httpfence.Middleware, Admit, generic tests).
//
// Do runs write only if token is not lower than the highest token admitted
// for resource, and records token as the highest if write succeeds. Equal
// tokens are admitted; a lower token is rejected with a *StaleTokenError
// (errors.Is(err, ErrStaleToken)) and write is not called; a zero token is
// rejected with ErrInvalidToken.
//
// write gets no handle to any store, so whether what it does is atomic with
// the check depends on the implementation:
//
//   - Memory runs write while holding the resource's mutex: for state that
//     lives in the same process, the check, the write and the record are one
//     atomic step.
//   - The Gate of a StoreGuard (sqlfence, redisfence, etcdfence, filefence)
//     runs write as a gate before the token is recorded: the token is
//     recorded only if write returns nil, but nothing write does is part of
//     the store's atomic step (redisfence and etcdfence do not even hold the
//     resource while write runs). To change the store atomically with the
//     check, use the StoreGuard's own Do and write through its handle.
//
// A Guard whose check is not atomic with the write (check, then write
// later) lets a stale holder slip in between and protects nothing.
type Guard interface {
	// Do calls write if token is not lower than the highest admitted for
	// resource, and records token if write returns nil (see Guard).
	Do(ctx context.Context, resource string, token Token, write func(ctx context.Context) error) error
}

// Admit records token for resource through g without a write of its own, for
// resources whose write happens elsewhere under the same atomic step. Every
// StoreGuard has an Admit method that does the same.
func Admit(ctx context.Context, g Guard, resource string, token Token) error {
	return g.Do(ctx, resource, token, nil)
}
