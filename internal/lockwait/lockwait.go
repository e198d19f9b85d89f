// Package lockwait holds what the adapters whose waiters queue in the
// server (redis, postgres) share about a wait that ends.
package lockwait

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/backend"
)

// Error maps the error of an adapter's Lock: a wait that ctx ended after
// the server had queued the acquisition, while its last word was that the
// acquisition waits, is a lock held by someone else (backend.ErrNotAcquired);
// if an attempt since failed, the backend has stopped answering and who
// holds the lock is unknown (backend.ErrUnavailable); a wait that ended
// before the server queued it keeps the last attempt's error, which tells
// why the server did not answer. state reports, when asked, whether the
// server queued the acquisition and the error of the last attempt that was
// answered or failed (nil if it was answered; an attempt cut short by ctx's
// end does not count); it is called only for an error that ctx's end may
// explain. adapter names the adapter in the message ("redis").
func Error(ctx context.Context, err error, adapter string, state func() (queued bool, lastAttempt error)) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, backend.ErrLeaseLost) || errors.Is(err, backend.ErrNotAcquired) {
		return err
	}
	queued, failing := state()
	switch {
	case queued && failing == nil && err != ctx.Err():
		// An attempt that ctx's end cut short: the adapter wrapped it in
		// ErrUnavailable, as any request without an answer, but it says
		// nothing of the backend, whose last word stands. Its text stays,
		// not its chain.
		return fmt.Errorf("%w: %s: queued behind the holder (the last attempt, cut short: %v): %w", backend.ErrNotAcquired, adapter, err, ctx.Err())
	case queued && failing == nil:
		return fmt.Errorf("%w: %s: queued behind the holder: %w", backend.ErrNotAcquired, adapter, err)
	case queued && failing != err:
		return fmt.Errorf("%w: %s: queued behind the holder, then an attempt failed: %w (last attempt: %w)", backend.ErrUnavailable, adapter, err, failing)
	case queued:
		return fmt.Errorf("%w: %s: queued behind the holder, then an attempt failed: %w", backend.ErrUnavailable, adapter, err)
	case failing != nil && failing != err:
		return fmt.Errorf("%w (last attempt: %w)", err, failing)
	}
	return err
}
