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

// ErrOutcomeUnknown matches (with errors.Is) the failure of a write whose
// outcome the guard cannot know: its request reached, or may have reached,
// the store, and the answer was lost (a connection cut or a timeout after
// the request was sent, a context that ended while the store was at work,
// a store that stopped before it answered). The write may have landed, with
// its token, or not at all; it was not rejected as stale.
//
// What to do: never treat it as stale (a newer holder did not
// necessarily win) and never assume the write failed. Find out: read the
// resource back (or check it by other means, such as a value only this
// write sets) and go on if it landed. Retrying the same write with the same
// token is safe only for a write that may land twice; a retry that is then
// rejected as stale says that a newer token has been admitted since, not
// that the first attempt did not land.
//
// Guards return it as an *OutcomeUnknownError, which also unwraps to the
// underlying error (a timeout, io.EOF, a gRPC status). A Do that
// fails before anything was sent, or that the store answered, returns that
// error instead.
var ErrOutcomeUnknown = errors.New("fencing: outcome unknown")

// OutcomeUnknownError is the failure of a write whose outcome is unknown
// (see ErrOutcomeUnknown): which write it was, and why its answer is
// missing.
type OutcomeUnknownError struct {
	Resource string // the guarded resource
	Token    Token  // the token the write carried
	Err      error  // why the outcome is unknown: the lost answer's error
}

// Error says that the write may have landed, and why its outcome is not
// known.
func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("fencing: outcome unknown of the write with token %d for %q (it may have landed): %v", e.Token, e.Resource, e.Err)
}

// Unwrap returns the underlying error.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

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
// A write whose answer is lost is never reported as stale: Do returns nil
// when it learns that the write landed (redisfence's retried script), and
// an error matching ErrOutcomeUnknown when it cannot know.
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
