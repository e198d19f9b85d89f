package conformance

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// requireReleased checks every surface of a released handle.
func (s *suite) requireReleased(t testing.TB, ls *backend.Lease) {
	t.Helper()
	require.True(t, isClosed(ls.Done()), "Done after Release")
	require.ErrorIs(t, ls.Err(), backend.ErrReleased)
	require.NotErrorIs(t, ls.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, context.Cause(ls.Context()), backend.ErrReleased)
	err := ls.Refresh(ctx(t, s.prompt))
	require.ErrorIs(t, err, backend.ErrReleased, "Refresh after Release")
	require.NotErrorIs(t, err, backend.ErrLeaseLost)
}

// testReleaseIdempotent: Release can be repeated and raced, a stale or
// retried Release never releases a newer holder, and nothing keeps a
// released lock alive.
func (s *suite) testReleaseIdempotent(t *testing.T) {
	a, b, c := s.locker(t), s.locker(t), s.locker(t)

	t.Run("Twice", func(t *testing.T) {
		name := lockName(t)
		la := s.try(t, a, name)
		release(t, la)
		release(t, la)
		s.requireReleased(t, la)
		lb := s.try(t, b, name)
		release(t, la) // must not touch b's grant
		s.requireHeld(t, c, name)
		release(t, lb)
	})

	t.Run("Concurrent", func(t *testing.T) {
		name := lockName(t)
		la := s.try(t, a, name)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = la.Release(ctx(t, s.prompt)) })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		s.requireReleased(t, la)
		release(t, s.try(t, b, name))
	})

	// A holder that was paused past its TTL releases late: it is told it had
	// lost the lock, and the new holder keeps it.
	t.Run("Stale", func(t *testing.T) {
		name := lockName(t)
		la := s.try(t, a, name, s.shortTTL(backend.WithAutoRenew(false))...)
		requireClosed(t, la.Done(), s.expiry, "Done of an unrenewed lease")
		lb := s.acquire(t, b, name, s.expiry)
		s.requireStaleReleaseHarmless(t, la, lb, c)
	})

	// A Release that could not reach the backend (here: its context was
	// already cancelled) still stops renewal, so the lock expires with its
	// TTL (redisson#7272); it can be retried (CURATOR-678), and the retry
	// does not release the next holder.
	t.Run("FailedThenRetried", func(t *testing.T) {
		name := lockName(t)
		la := s.try(t, a, name, s.shortTTL(backend.WithAutoRenew(true))...)
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		first := la.Release(dead)
		t.Logf("Release with a cancelled context: %v", first)
		require.True(t, isClosed(la.Done()), "Done after Release, even a failed one")

		var lb *backend.Lease
		if first == nil {
			lb = s.try(t, b, name)
		} else {
			lb = s.acquire(t, b, name, s.expiry)
		}
		assert.Greater(t, lb.Token(), la.Token())

		retry := la.Release(ctx(t, s.prompt))
		if first == nil {
			require.NoError(t, retry, "Release after a successful Release")
		} else if retry != nil {
			require.ErrorIs(t, retry, backend.ErrLeaseLost, "retried Release after the lock expired")
		}
		require.NoError(t, lb.Err())
		s.requireHeld(t, c, name, "a retried Release must not release the new holder")
		release(t, lb)
	})
}

// testClose: Close ends pending acquisitions with ErrClosed, releases held
// leases at once, refuses new acquisitions, and can be repeated.
func (s *suite) testClose(t *testing.T) {
	t.Run("PendingAcquire", func(t *testing.T) {
		name := lockName(t)
		a, b, c := s.locker(t), s.locker(t), s.locker(t)
		la := s.try(t, a, name)
		ch := goAcquire(t, ctx(t, s.long), b, name)
		requireWaiting(t, ch, s.settle, "waiter before Close")
		require.NoError(t, b.Close())
		r := wait(t, ch, s.prompt, "waiter after its Locker was closed")
		require.Nil(t, r.lease)
		require.ErrorIs(t, r.err, backend.ErrClosed)

		// The closed waiter left nothing behind (it had the long TTL).
		release(t, la)
		release(t, s.try(t, c, name))
	})

	t.Run("HeldLease", func(t *testing.T) {
		name := lockName(t)
		a, b := s.locker(t), s.locker(t)
		la := s.try(t, a, name)
		require.NoError(t, a.Close())
		s.requireReleased(t, la)
		// Released by Close, not expired: free at once (long TTL).
		lb := s.try(t, b, name)
		require.NoError(t, la.Release(ctx(t, s.prompt)), "Release after Close")
		s.requireHeld(t, s.locker(t), name, "Release after Close must not release the new holder")
		release(t, lb)
	})

	t.Run("AfterClose", func(t *testing.T) {
		a := s.locker(t)
		require.NoError(t, a.Close())
		require.NoError(t, a.Close(), "second Close")
		for _, acq := range []func(context.Context, string, ...backend.Option) (*backend.Lease, error){a.Acquire, a.TryAcquire} {
			ls, err := acq(ctx(t, s.prompt), lockName(t))
			hold(t, ls)
			require.Nil(t, ls)
			require.ErrorIs(t, err, backend.ErrClosed)
		}
		_, err := a.Status(ctx(t, s.prompt), lockName(t))
		require.ErrorIs(t, err, backend.ErrClosed, "Status after Close")
		_, err = a.Revoke(ctx(t, s.prompt), lockName(t), 1)
		require.ErrorIs(t, err, backend.ErrClosed, "Revoke after Close")
		_, err = a.RevokeID(ctx(t, s.prompt), lockName(t), "1")
		require.ErrorIs(t, err, backend.ErrClosed, "RevokeID after Close")
	})

	// Close after a lease was lost and its loss reported by Release has
	// nothing left to report.
	t.Run("AfterLoss", func(t *testing.T) {
		name := lockName(t)
		a, b := s.locker(t), s.locker(t)
		la := s.try(t, a, name, s.shortTTL()...)
		s.h.Revoke(t, la)
		requireClosed(t, la.Done(), s.expiry, "revoked lease's Done")
		require.ErrorIs(t, la.Release(ctx(t, s.prompt)), backend.ErrLeaseLost)
		require.NoError(t, a.Close(), "Close after the lost lease was released")
		release(t, s.acquire(t, b, name, s.expiry))
	})
}
