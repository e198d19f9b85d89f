package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

// requireLost checks that ls ended because it was lost, not released, on
// every surface of the handle (consul#4935: after the loss signal the handle
// must not think it holds).
func (s *suite) requireLost(t testing.TB, ls *backend.Lease) {
	t.Helper()
	require.True(t, isClosed(ls.Done()), "Done")
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost, "Err")
	require.Error(t, ls.Context().Err(), "Context")
	require.ErrorIs(t, context.Cause(ls.Context()), backend.ErrLeaseLost, "context.Cause(Context())")
	require.ErrorIs(t, ls.Refresh(ctx(t, s.prompt)), backend.ErrLeaseLost, "Refresh after the loss")
}

// requireNotBefore checks the safety promise of the local deadline: the
// lock was granted to someone else (at granted) no earlier than the old
// holder's deadline, so a holder that stops at its deadline never overlaps
// the next one.
func requireNotBefore(t testing.TB, granted time.Time, old *backend.Lease) {
	t.Helper()
	d := old.Deadline()
	require.False(t, d.IsZero(), "a granted lease has a deadline")
	require.False(t, granted.Before(d),
		"the lock was granted to another holder %v before the old holder's local deadline", d.Sub(granted))
}

// timerLag is how late a timer may fire on a busy machine: the loss
// signal of a lease whose deadline passed is a timer's work, which the
// scheduler may run after a grant it preceded in time.
const timerLag = time.Second

// requireLostBy checks that old's deadline had passed when another holder
// was granted the lock (granted), and that its Done fires (at once, or
// within timerLag: its timer's callback may not have run yet).
func requireLostBy(t testing.TB, granted time.Time, old *backend.Lease, what string) {
	t.Helper()
	requireNotBefore(t, granted, old)
	requireClosed(t, old.Done(), timerLag, what)
}

// testHolderCrash: the lock of a crashed holder expires server-side and is
// granted to another Locker with a greater token.
func (s *suite) testHolderCrash(t *testing.T) {
	name := lockName(t)
	a, b := s.locker(t), s.locker(t)
	la := s.try(t, a, name, s.shortTTL()...)

	chB := goAcquire(t, ctx(t, s.expiry), b, name)
	requireWaiting(t, chB, s.settle, "waiter while the holder lives")
	s.h.Crash(t, a)
	r := wait(t, chB, s.expiry, "waiter after the holder crashed")
	require.NoError(t, r.err)
	assert.Greater(t, r.lease.Token(), la.Token())
	requireNotBefore(t, r.at, la)

	// The crashed holder's handle finds out too, from its local deadline.
	requireClosed(t, la.Done(), s.expiry, "crashed holder's Done")
	require.ErrorIs(t, la.Err(), backend.ErrLeaseLost)
	release(t, r.lease)
}

// testWaiterCrash: a waiter that can no longer renew its lease gives up with
// ErrLeaseLost, never a grant (etcd#19597, etcd#11456), and what it left in
// the queue does not block the lock beyond its TTL.
func (s *suite) testWaiterCrash(t *testing.T) {
	name := lockName(t)
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	la := s.try(t, a, name)

	chB := goAcquire(t, ctx(t, s.long), b, name, s.shortTTL()...)
	requireWaiting(t, chB, s.settle, "waiter before its crash")
	// Queued, not still opening its session or lease: a crash then would
	// be bounded by the dial timeout, not by the waiter's TTL (a ZooKeeper
	// session dialled on a loaded machine outlasted the settle time once).
	s.requireQueued(t, a, name, 1)
	s.h.Crash(t, b)
	r := wait(t, chB, s.expiry, "crashed waiter")
	require.Nil(t, r.lease, "a waiter that lost its lease must not be granted")
	// Locker reports ErrLeaseLost when the lease could not be renewed; a
	// backend may fail the cut connection's wait sooner with its own error.
	require.Error(t, r.err)
	t.Logf("crashed waiter: %v", r.err)

	release(t, la)
	lc := s.acquire(t, c, name, s.expiry)
	assert.Greater(t, lc.Token(), la.Token())
	release(t, lc)
}

// testWaiterRevoked: a waiter whose lease is removed on the server while it
// waits returns ErrLeaseLost promptly, never a grant, even when the lock
// is released right after (etcd#19597, etcd#11456). It needs the optional
// WaiterRevoker.
func (s *suite) testWaiterRevoked(t *testing.T) {
	wr, ok := s.h.(WaiterRevoker)
	if !ok {
		t.Skip("the harness does not implement WaiterRevoker")
	}
	for _, releaseToo := range []bool{false, true} {
		label := "Waiting"
		if releaseToo {
			label = "ThenReleased"
		}
		t.Run(label, func(t *testing.T) {
			name := lockName(t)
			a, b, c := s.locker(t), s.locker(t), s.locker(t)
			la := s.try(t, a, name)
			chB := goAcquire(t, ctx(t, s.long), b, name)
			// Queued in the backend before the revoke, not only blocked
			// (on a loaded machine, ZooKeeper's node came later than the
			// settle time, and nothing was revoked).
			s.requireQueued(t, c, name, 1)
			requireWaiting(t, chB, s.settle, "waiter before the revoke")
			require.Equal(t, 1, wr.RevokeWaiters(t, name), "waiters revoked")
			if releaseToo {
				release(t, la)
			}
			r := wait(t, chB, s.expiry, "waiter whose lease was revoked")
			require.Nil(t, r.lease, "a waiter whose lease was revoked must not be granted")
			require.ErrorIs(t, r.err, backend.ErrLeaseLost)
			if !releaseToo {
				require.NoError(t, la.Err(), "revoking a waiter must not touch the holder")
				s.requireHeld(t, c, name)
				release(t, la)
			}
			release(t, s.acquire(t, c, name, s.prompt))
		})
	}
}

// testAutoRenew: a holder keeps a short-TTL lock for more than 3 TTLs while
// others fail to take it; a waiter's own short-TTL lease stays alive too.
func (s *suite) testAutoRenew(t *testing.T) {
	t.Run("Holder", func(t *testing.T) {
		name := lockName(t)
		a, b, c := s.locker(t), s.locker(t), s.locker(t)
		la := s.try(t, a, name, s.shortTTL(backend.WithAutoRenew(true))...)
		first := la.Deadline()

		hold := 3*s.short + s.short/2
		wctx, cancel := context.WithTimeout(context.Background(), hold)
		defer cancel()
		chB := goAcquire(t, wctx, b, name, s.shortTTL()...)
		end := time.Now().Add(hold)
		for time.Now().Before(end) {
			require.NoError(t, la.Err(), "auto-renewed lease lost")
			require.True(t, time.Now().Before(la.Deadline()), "deadline of a held lease is in the past")
			s.requireHeld(t, c, name)
			time.Sleep(s.short / 4)
		}
		r := wait(t, chB, s.prompt, "waiter with a deadline")
		require.Nil(t, r.lease)
		require.ErrorIs(t, r.err, backend.ErrNotAcquired)
		require.ErrorIs(t, r.err, context.DeadlineExceeded, "the waiter must give up at its deadline, not lose its own lease")

		require.NoError(t, la.Err())
		assert.True(t, la.Deadline().After(first), "renewal moves the deadline forward")
		release(t, la)
	})

	// WithAutoRenew(false) is about the hold: a waiter cannot call Refresh,
	// so its lease must still be kept alive while it waits, however long.
	t.Run("OffWhileWaiting", func(t *testing.T) {
		name := lockName(t)
		a, b := s.locker(t), s.locker(t)
		la := s.try(t, a, name)
		chB := goAcquire(t, ctx(t, s.long), b, name, s.shortTTL(backend.WithAutoRenew(false))...)
		requireWaiting(t, chB, 2*s.short, "waiter")
		release(t, la)
		r := wait(t, chB, s.prompt, "waiter with auto-renew off, after the holder released")
		require.NoError(t, r.err, "a waiter with auto-renew off must not lose its lease by waiting longer than its TTL")
		assert.Greater(t, r.lease.Token(), la.Token())
		assert.True(t, r.lease.Deadline().After(r.at))
		release(t, r.lease)
	})
}

// testLoss: the loss signal of a lease that expires or is revoked, and what
// the lost handle does afterwards.
func (s *suite) testLoss(t *testing.T) {
	a, b, c := s.locker(t), s.locker(t), s.locker(t)

	// Without renewal the holder's loss signal fires no later than the
	// server could give the lock away.
	t.Run("Expires", func(t *testing.T) {
		name := lockName(t)
		la := s.try(t, a, name, s.shortTTL(backend.WithAutoRenew(false))...)
		lb := s.acquire(t, b, name, s.expiry)
		granted := time.Now()
		requireLostBy(t, granted, la, "the old holder's Done, once another Locker was granted the lock,")
		assert.Greater(t, lb.Token(), la.Token())
		s.requireLost(t, la)
		s.requireStaleReleaseHarmless(t, la, lb, c)
	})

	// A revoked lease is noticed by its holder, and a waiter is granted.
	t.Run("Revoked", func(t *testing.T) {
		name := lockName(t)
		la := s.try(t, a, name, s.shortTTL()...)
		chB := goAcquire(t, ctx(t, s.long), b, name)
		requireWaiting(t, chB, s.settle, "waiter before the revoke")
		s.h.Revoke(t, la)
		r := wait(t, chB, s.expiry, "waiter after the holder's lease was revoked")
		require.NoError(t, r.err)
		assert.Greater(t, r.lease.Token(), la.Token())
		requireClosed(t, la.Done(), s.expiry, "revoked lease's Done")
		s.requireLost(t, la)
		s.requireStaleReleaseHarmless(t, la, r.lease, c)
	})

	// A lost lease is not re-acquired behind the holder's back (redsync
	// WithSetNXOnExtend), but its Locker can acquire the name again.
	t.Run("RevokedThenReacquired", func(t *testing.T) {
		name := lockName(t)
		la := s.try(t, a, name, s.shortTTL()...)
		s.h.Revoke(t, la)
		requireClosed(t, la.Done(), s.expiry, "revoked lease's Done")
		s.requireLost(t, la)
		again := s.acquire(t, a, name, s.prompt)
		assert.Greater(t, again.Token(), la.Token())
		s.requireHeld(t, c, name)
		release(t, again)
	})
}

// requireStaleReleaseHarmless: Release of a lost lease reports the loss and
// leaves the new holder alone (etcd#22082, CURATOR-678/486), however often
// it is called.
func (s *suite) requireStaleReleaseHarmless(t testing.TB, old, cur *backend.Lease, other *backend.Locker) {
	t.Helper()
	for range 2 {
		require.ErrorIs(t, old.Release(ctx(t, s.prompt)), backend.ErrLeaseLost, "Release of a lost lease")
		require.NoError(t, cur.Err(), "the new holder's lease after the old holder's Release")
		s.requireHeld(t, other, cur.Name(), "the new holder must still hold after a stale Release")
	}
	release(t, cur)
}

// testMaxHold: with WithMaxHold, renewal stops once the lease has been held
// that long, and the lease is lost about one TTL later.
func (s *suite) testMaxHold(t *testing.T) {
	name := lockName(t)
	a, b := s.locker(t), s.locker(t)
	maxHold := 3 * s.short
	start := time.Now()
	la := s.try(t, a, name, s.shortTTL(backend.WithMaxHold(maxHold))...)

	// Renewal ran (the lease outlived its TTL) ...
	time.Sleep(time.Until(start.Add(maxHold - s.short/2)))
	require.NoError(t, la.Err(), "lease lost before its max hold")
	// ... and stopped: the lease is lost within max hold + TTL (+ slack).
	requireClosed(t, la.Done(), time.Until(start.Add(maxHold+s.expiry)), "Done of a lease past its max hold")
	require.ErrorIs(t, la.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, la.Err(), backend.ErrMaxHold, "the loss names its cause")
	require.Equal(t, "max_hold", lossCause(la.Err()))
	lb := s.acquire(t, b, name, s.expiry)
	assert.Greater(t, lb.Token(), la.Token())
	requireNotBefore(t, time.Now(), la)
	release(t, lb)
}

// testStaleHolderFenced is the story fencing tokens exist for: A pauses past
// its TTL, B is granted the lock and writes, A wakes up and writes with its
// old token: the resource rejects it.
func (s *suite) testStaleHolderFenced(t *testing.T) {
	name := lockName(t)
	resource := "conformance-resource"
	guard := fencing.NewMemory()
	a, b := s.locker(t), s.locker(t)

	la := s.try(t, a, name, s.shortTTL(backend.WithAutoRenew(false))...)
	write := func(ls *backend.Lease, wrote *bool) error {
		return guard.Do(ctx(t, s.prompt), resource, ls.Token(), func(context.Context) error {
			*wrote = true
			return nil
		})
	}
	var aWrote, bWrote, aLate bool
	require.NoError(t, write(la, &aWrote))
	require.True(t, aWrote)

	// A "pauses": it neither renews nor checks its lease until B got in.
	chB := goAcquire(t, ctx(t, s.expiry), b, name)
	r := wait(t, chB, s.expiry, "B while A is paused")
	require.NoError(t, r.err)
	lb := r.lease
	require.Greater(t, lb.Token(), la.Token())
	require.NoError(t, write(lb, &bWrote))
	require.True(t, bWrote)

	// A wakes up and writes with its old token.
	err := write(la, &aLate)
	require.ErrorIs(t, err, fencing.ErrStaleToken)
	var stale *fencing.StaleTokenError
	require.True(t, errors.As(err, &stale), "the rejection is a *fencing.StaleTokenError: %v", err)
	assert.Equal(t, la.Token(), stale.Token)
	assert.Equal(t, lb.Token(), stale.Highest)
	assert.Equal(t, resource, stale.Resource)
	assert.False(t, aLate, "the stale write must not run")
	assert.Equal(t, lb.Token(), guard.Highest(resource))

	// Had A looked, it would have known.
	requireLostBy(t, r.at, la, "A's Done, although B holds the lock,")
	require.ErrorIs(t, la.Err(), backend.ErrLeaseLost)
	release(t, lb)
}
