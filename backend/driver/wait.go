package driver

import (
	"context"
	"errors"
	"fmt"
)

// EndedWait is the rule for a wait that its context ended: the lock is held
// by someone else (ErrNotAcquired) only if the backend had queued the
// acquisition behind a holder and has not stopped answering since, so that
// its last word stands; otherwise who holds the lock is unknown
// (ErrUnavailable). WaitError applies it to a Lease's Lock, package backend
// to what the Locker sees of the lease.
func EndedWait(queued, stopped bool) error {
	if queued && !stopped {
		return ErrNotAcquired
	}
	return ErrUnavailable
}

// Wait is what a Lease's Lock knows of its wait when it fails after its
// context ended: the facts from which WaitError makes its error.
type Wait struct {
	// Where names the driver and the queue, first in the error
	// ("etcd: queued").
	Where string
	// Queued: the backend had queued the acquisition (answered its request
	// to wait).
	Queued bool
	// Stopped says how the backend stopped answering once it had queued
	// the acquisition ("disconnected"), or is empty if it did not.
	Stopped string
	// Last is the error of the last attempt if it failed without an answer
	// (one cut short by the context's end does not count), or nil. Its
	// failure, if queued, is the backend's having stopped answering.
	Last error
	// CutShort: the error is an attempt that the context's end cut short,
	// which the driver made an ErrUnavailable, as any request without an
	// answer, but which says nothing of the backend. Its text stays in a
	// queued wait's error, not its chain.
	CutShort bool
}

// WaitError returns the error of a Lock whose wait failed with err, as
// EndedWait decides from w if ctx ended: if the backend had queued the
// acquisition, an error matching ErrNotAcquired or ErrUnavailable with err
// in the chain; if not, err itself, which says why the backend did not
// answer (with w.Last, if it is another error). err is returned as it is
// if it is nil, if ctx did not end, or if it says the lease is lost or the
// lock is held.
func WaitError(ctx context.Context, err error, w Wait) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotAcquired) {
		return err
	}
	stopped := w.Stopped != "" || w.Last != nil
	switch kind := EndedWait(w.Queued, stopped); {
	case !w.Queued && w.Last != nil && w.Last != err:
		return fmt.Errorf("%w (last attempt: %w)", err, w.Last)
	case !w.Queued:
		return err
	case kind == ErrNotAcquired && w.CutShort:
		return fmt.Errorf("%w: %s (the last attempt, cut short: %v): %w", kind, w.Where, err, ctx.Err())
	case kind == ErrNotAcquired:
		return fmt.Errorf("%w: %s: %w", kind, w.Where, err)
	}
	how := w.Stopped
	if how == "" {
		how = "an attempt failed"
	}
	if w.Last != nil && w.Last != err {
		return fmt.Errorf("%w: %s, then %s: %w (last attempt: %w)", ErrUnavailable, w.Where, how, err, w.Last)
	}
	return fmt.Errorf("%w: %s, then %s: %w", ErrUnavailable, w.Where, how, err)
}
