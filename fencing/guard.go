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

// Guard is the check a protected resource runs before every write.
//
// Do runs write only if token is not lower than the highest token admitted
// for resource, and records token as the highest if write succeeds. The check,
// the write and the record are one atomic step with respect to every other Do
// on the same resource: that is what makes fencing work. A Guard whose check
// is not atomic with the write (check, then write later) lets a stale holder
// slip in between and protects nothing.
//
// Equal tokens are admitted: one holder writes many times under one grant,
// and a retried write carries the same token. A token that is lower is
// rejected with a *StaleTokenError (errors.Is(err, ErrStaleToken)), and write
// is not called. A zero token is rejected with ErrInvalidToken.
//
// Durable implementations (SQL, Redis, etcd, files) keep the highest token in
// the same store and transaction as the data it protects.
type Guard interface {
	Do(ctx context.Context, resource string, token Token, write func(ctx context.Context) error) error
}

// Admit records token for resource through g without a write of its own, for
// resources whose write happens elsewhere under the same atomic step.
func Admit(ctx context.Context, g Guard, resource string, token Token) error {
	return g.Do(ctx, resource, token, nil)
}
