package conformance

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// testTryAcquire: TryAcquire fails at once on a held lock, succeeds on a free
// one, and a failed attempt leaves nothing behind.
func (s *suite) testTryAcquire(t *testing.T) {
	name := lockName(t)
	a, b := s.locker(t), s.locker(t)

	la := s.try(t, a, name)
	assert.NotZero(t, la.Token(), "a grant carries a non-zero token")
	assert.Equal(t, name, la.Name())
	assert.Equal(t, s.long, la.TTL(), "the Locker's default TTL")
	assert.NotEmpty(t, la.Holder(), "a default holder identity")
	assert.NoError(t, la.Err())
	for range 3 {
		// The context is long: "at once" means the call does not wait for
		// the holder, which the prompt bound tells apart from a wait of
		// the long TTL.
		ls, err := b.TryAcquire(ctx(t, s.long), name)
		hold(t, ls)
		require.ErrorIs(t, err, backend.ErrNotAcquired)
		require.Nil(t, ls)
	}
	release(t, la)

	// The failed attempts left no queue entry or key: the lock is free.
	lb := s.try(t, b, name)
	assert.Greater(t, lb.Token(), la.Token())
	release(t, lb)
	lc := s.try(t, a, name, backend.WithHolder("conformance-holder"), backend.WithTTL(s.short))
	assert.Greater(t, lc.Token(), lb.Token())
	assert.Equal(t, "conformance-holder", lc.Holder(), "an acquisition's options override the Locker's")
	assert.Equal(t, s.short, lc.TTL())
	release(t, lc)
}

// testAcquireBlocksUntilRelease: Acquire on a held lock waits, and is granted
// promptly (not after a TTL) once the holder releases.
func (s *suite) testAcquireBlocksUntilRelease(t *testing.T) {
	name := lockName(t)
	a, b, c := s.locker(t), s.locker(t), s.locker(t)

	la := s.try(t, a, name)
	ch := goAcquire(t, ctx(t, s.long), b, name)
	requireWaiting(t, ch, s.settle, "Acquire of a held lock")
	s.requireHeld(t, c, name)
	require.NoError(t, la.Err(), "the holder keeps its lease while another waits")

	release(t, la)
	r := wait(t, ch, s.prompt, "waiter after the holder released")
	require.NoError(t, r.err)
	assert.Greater(t, r.lease.Token(), la.Token())
	assert.NoError(t, r.lease.Err())
	s.requireHeld(t, c, name)
	release(t, r.lease)
}

// testCancelWhileWaiting: a waiter whose context is cancelled or expires
// returns an error matching ErrNotAcquired and the context's error, and
// leaves nothing behind: the next Acquire is granted as soon as the holder
// releases (the orphan-queue-node bug, go-zookeeper#229). Waiters use the
// long TTL, so an orphan would block the next Acquire far beyond the prompt
// bound.
func (s *suite) testCancelWhileWaiting(t *testing.T) {
	a, b, c := s.locker(t), s.locker(t), s.locker(t)

	for _, tc := range []struct {
		name   string
		cancel bool
		want   error
	}{
		{"Cancel", true, context.Canceled},
		{"Deadline", false, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := lockName(t)
			la := s.try(t, a, name)

			var wctx context.Context
			var cancel context.CancelFunc
			if tc.cancel {
				wctx, cancel = context.WithCancel(context.Background())
			} else {
				wctx, cancel = context.WithTimeout(context.Background(), s.answered())
			}
			defer cancel()
			ch := goAcquire(t, wctx, b, name)
			if tc.cancel {
				requireWaiting(t, ch, s.settle, "waiter before cancel")
				s.requireQueued(t, a, name, 1)
				cancel()
			}
			r := wait(t, ch, s.prompt, "cancelled waiter")
			require.Nil(t, r.lease)
			require.ErrorIs(t, r.err, backend.ErrNotAcquired)
			require.ErrorIs(t, r.err, tc.want)

			release(t, la)
			lc := s.acquire(t, c, name, s.prompt)
			assert.Greater(t, lc.Token(), la.Token())
			release(t, lc)
			// And the Locker of the cancelled waiter still works.
			lb := s.try(t, b, name)
			release(t, lb)
		})
	}

	t.Run("MiddleOfQueue", func(t *testing.T) {
		name := lockName(t)
		la := s.try(t, a, name)
		long := ctx(t, s.long)
		first := goAcquire(t, long, b, name)
		requireWaiting(t, first, s.settle, "first waiter")
		s.requireQueued(t, a, name, 1)
		mctx, mcancel := context.WithCancel(long)
		defer mcancel()
		middle := goAcquire(t, mctx, s.locker(t), name)
		requireWaiting(t, middle, s.settle, "middle waiter")
		s.requireQueued(t, a, name, 2)
		last := goAcquire(t, long, c, name)
		requireWaiting(t, last, s.settle, "last waiter")
		s.requireQueued(t, a, name, 3)

		mcancel()
		r := wait(t, middle, s.prompt, "cancelled middle waiter")
		require.Nil(t, r.lease)
		require.ErrorIs(t, r.err, backend.ErrNotAcquired)
		require.ErrorIs(t, r.err, context.Canceled)

		release(t, la)
		// Both remaining waiters get the lock in turn, each promptly after
		// the previous holder released.
		prev := la.Token()
		var got []string
		pending := map[string]chan result{"first": first, "last": last}
		for len(pending) > 0 {
			var r result
			var who string
			select {
			case r = <-first:
				who = "first"
			case r = <-last:
				who = "last"
			case <-ctx(t, s.prompt).Done():
				require.FailNow(t, "remaining waiters not granted in time", "granted so far: %v", got)
			}
			hold(t, r.lease)
			require.NoError(t, r.err, "%s waiter", who)
			assert.Greater(t, r.lease.Token(), prev)
			prev = r.lease.Token()
			got = append(got, who)
			delete(pending, who)
			for other, ch := range pending {
				requireWaiting(t, ch, 0, other+" waiter while "+who+" holds")
			}
			release(t, r.lease)
		}
		if s.caps.FIFO {
			assert.Equal(t, []string{"first", "last"}, got, "grant order")
		}
	})
}

// testErrors: a held lock, a given-up wait and a cancelled context can be
// told apart with errors.Is (redsync#164).
func (s *suite) testErrors(t *testing.T) {
	name := lockName(t)
	a, b := s.locker(t), s.locker(t)
	la := s.try(t, a, name)

	others := []error{backend.ErrLeaseLost, backend.ErrClosed, backend.ErrInvalidName, backend.ErrInvalidOption, backend.ErrReleased,
		backend.ErrUnavailable, backend.ErrPermission}
	notOthers := func(err error) {
		t.Helper()
		for _, o := range others {
			assert.NotErrorIs(t, err, o)
		}
	}

	_, err := b.TryAcquire(ctx(t, s.long), name)
	require.ErrorIs(t, err, backend.ErrNotAcquired, "TryAcquire of a held lock")
	assert.NotErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	notOthers(err)

	dctx, dcancel := context.WithTimeout(context.Background(), s.answered())
	defer dcancel()
	_, err = b.Acquire(dctx, name)
	require.ErrorIs(t, err, backend.ErrNotAcquired, "Acquire past its deadline")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, context.Canceled)
	notOthers(err)

	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	for _, acq := range []func(context.Context, string, ...backend.Option) (*backend.Lease, error){b.Acquire, b.TryAcquire} {
		ls, err := acq(cctx, lockName(t)) // a free lock: the context alone decides
		hold(t, ls)
		require.Nil(t, ls, "a cancelled context must not be granted a lock")
		require.ErrorIs(t, err, backend.ErrNotAcquired)
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		notOthers(err)
	}

	cause := errors.New("shutting down")
	xctx, xcancel := context.WithCancelCause(context.Background())
	ch := goAcquire(t, xctx, b, name)
	requireWaiting(t, ch, s.settle, "waiter before cancel with cause")
	s.requireQueued(t, b, name, 1)
	xcancel(cause)
	r := wait(t, ch, s.prompt, "waiter cancelled with a cause")
	require.ErrorIs(t, r.err, backend.ErrNotAcquired)
	require.ErrorIs(t, r.err, context.Canceled)
	notOthers(r.err)
	release(t, la)
}
