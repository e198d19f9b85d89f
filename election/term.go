package election

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

// Term is one candidate's leadership, from Campaign to Resign or loss. Its
// loss signal (Done, Context) fires when the term ends: resigned, or lost
// (its lease could not be renewed by the local deadline, or the backend
// dropped it), before the backend could grant the next term. A Term is
// safe for concurrent use.
type Term struct {
	lease *backend.Lease
}

// Name returns the election's name.
func (t *Term) Name() string { return t.lease.Name() }

// Token returns the term number: the fencing token of this term, larger
// than every earlier term's. Send it with every write the leader makes.
func (t *Term) Token() fencing.Token { return t.lease.Token() }

// Value returns this leader's value, as its last Proclaim left it.
func (t *Term) Value() string { return t.lease.Value() }

// Done returns a channel closed when the term ends.
func (t *Term) Done() <-chan struct{} { return t.lease.Done() }

// Context returns a context cancelled when the term ends; run the leader's
// work under it. context.Cause says why (an error matching
// backend.ErrLeaseLost or backend.ErrReleased).
func (t *Term) Context() context.Context { return t.lease.Context() }

// Err returns nil while the term lasts, then why it ended.
func (t *Term) Err() error { return t.lease.Err() }

// Deadline returns the local deadline until which this candidate may
// assume it leads, unless Done fired earlier (see backend.Lease.Deadline).
func (t *Term) Deadline() time.Time { return t.lease.Deadline() }

// Lease returns the lease behind the term, for what a Term does not
// expose (Refresh, Suspended, a fencing guard that takes a Lease).
func (t *Term) Lease() *backend.Lease { return t.lease }

// Proclaim replaces this leader's value without ending the term: the token
// stays, and observers see the new value. It returns an error matching
// backend.ErrLeaseLost if the term was lost (nothing is stored once the
// next term can be granted; see backend.Lease.Proclaim), and
// backend.ErrUnavailable if the backend did not answer (the value may or
// may not be stored: call it again).
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if err := t.lease.Proclaim(ctx, value); err != nil {
		return fmt.Errorf("fencelock: election %q: %w", t.lease.Name(), err)
	}
	return nil
}

// Resign ends the term and hands the election to the next candidate at
// once, without waiting for the TTL. It is Lease.Release: idempotent, and
// an error matching backend.ErrLeaseLost if the term had been lost.
func (t *Term) Resign(ctx context.Context) error {
	if err := t.lease.Release(ctx); err != nil {
		return fmt.Errorf("fencelock: resign %q: %w", t.lease.Name(), err)
	}
	return nil
}
