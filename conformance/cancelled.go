package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// testCancelledCalls: a call made with a context that has already ended
// (Status, Revoke, RevokeID, Refresh, Proclaim, Release) returns at once
// with nil or an error matching ErrUnavailable and context.Canceled: the
// backend did not answer, which is not the same as an answer that the
// lock is held, lost or gone. A lease whose Refresh or Proclaim was cut
// short so is still held, and a Release cut short can be made again.
func (s *suite) testCancelledCalls(t *testing.T) {
	name := lockName(t)
	l := s.locker(t)
	ls := s.try(t, l, name, backend.WithValue("before"))
	cctx, cancel := context.WithCancel(context.Background())
	cancel()

	// A Locker may refuse what it cannot use before it asks the backend:
	// an id not of its form (RevokeID), an operation it lacks (Status,
	// Revoke, RevokeID).
	check := func(what string, err error, refusable bool) {
		t.Helper()
		if err == nil || refusable && (errors.Is(err, errors.ErrUnsupported) || errors.Is(err, backend.ErrInvalidOption)) {
			return
		}
		require.ErrorIs(t, err, backend.ErrUnavailable, "%s with a cancelled context", what)
		require.ErrorIs(t, err, context.Canceled, "%s with a cancelled context", what)
		for _, o := range []error{backend.ErrNotAcquired, backend.ErrLeaseLost, backend.ErrReleased, backend.ErrClosed} {
			require.NotErrorIs(t, err, o, "%s with a cancelled context", what)
		}
	}
	timed := func(what string, call func() error, refusable bool) {
		t.Helper()
		start := time.Now()
		err := call()
		require.Less(t, time.Since(start), s.prompt, "%s with a cancelled context must return at once", what)
		check(what, err, refusable)
	}
	timed("Status", func() error { _, err := l.Status(cctx, name); return err }, true)
	timed("Revoke", func() error { _, err := l.Revoke(cctx, name, ls.Token()+1); return err }, true)
	timed("RevokeID", func() error { _, err := l.RevokeID(cctx, name, "no such id"); return err }, true)
	timed("Refresh", func() error { return ls.Refresh(cctx) }, false)
	timed("Proclaim", func() error { return ls.Proclaim(cctx, "after") }, false)
	require.NoError(t, ls.Err(), "a lease whose Refresh and Proclaim had no answer is still held")
	require.NoError(t, ls.Refresh(ctx(t, s.prompt)), "Refresh after the cancelled calls")

	timed("Release", func() error { return ls.Release(cctx) }, false)
	err := ls.Release(ctx(t, s.prompt))
	if err != nil {
		// The cancelled Release may have reached the backend after all.
		require.ErrorIs(t, err, backend.ErrLeaseLost, "Release again after a cancelled one")
	}
	release(t, s.try(t, s.locker(t), name))
}
