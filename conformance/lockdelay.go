package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// lockDelay is the lock-delay the suite's cases give: the short TTL, at
// least 1s, in whole seconds (etcd's unit), so that a grant before the
// delay ended stands out from a loaded machine's lag.
func (s *suite) lockDelay() time.Duration {
	return max(s.short, time.Second).Round(time.Second)
}

// requireLockDelay skips a lock-delay case on a backend that does not
// honour one, after checking that it refuses the option.
func (s *suite) requireLockDelay(t *testing.T) {
	t.Helper()
	if s.caps.LockDelay {
		return
	}
	l := s.locker(t)
	ls, err := l.TryAcquire(ctx(t, s.prompt), lockName(t), backend.WithLockDelay(time.Second))
	hold(t, ls)
	require.ErrorIs(t, err, backend.ErrInvalidOption, "a backend without lock-delay must refuse WithLockDelay")
	t.Skip("the backend does not honour a lock-delay (it refuses the option)")
}

// testLockDelayCrash: the lock of a holder that crashed with a lock-delay
// is granted to nobody before its lease's end plus the delay (the waiter
// is not granted it before the holder's local deadline plus the delay,
// and a TryAcquire in the delay finds it held), and is granted after.
func (s *suite) testLockDelayCrash(t *testing.T) {
	s.requireLockDelay(t)
	name := lockName(t)
	delay := s.lockDelay()
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	la := s.try(t, a, name, s.shortTTL(backend.WithLockDelay(delay))...)

	chB := goAcquire(t, ctx(t, s.expiry+delay+s.prompt), b, name)
	requireWaiting(t, chB, s.settle, "waiter while the holder lives")
	s.h.Crash(t, a)
	// No renewal succeeds from now: the server's expiry is not before
	// the local deadline, and the delay runs from there at the earliest.
	requireClosed(t, la.Done(), s.expiry, "crashed holder's Done")
	notBefore := la.Deadline().Add(delay)

	// In the delay, the lock is held for everyone, a TryAcquire too.
	if time.Until(notBefore) > s.answered() {
		lc, err := c.TryAcquire(ctx(t, s.prompt), name)
		hold(t, lc)
		if time.Now().Before(notBefore) {
			require.ErrorIs(t, err, backend.ErrNotAcquired, "TryAcquire in the lock-delay")
		}
	}
	r := wait(t, chB, s.expiry+delay, "waiter after the holder crashed and the lock-delay")
	require.NoError(t, r.err)
	assert.Greater(t, r.lease.Token(), la.Token())
	require.False(t, r.at.Before(notBefore),
		"granted %v before the crashed holder's deadline plus its lock-delay %v", notBefore.Sub(r.at), delay)
	t.Logf("granted %v after the crashed holder's deadline (lock-delay %v, TTL %v)", r.at.Sub(la.Deadline()), delay, s.short)
	release(t, r.lease)
}

// testLockDelayRelease: a lock-delay does not delay the grant after its
// holder's release: the waiter is granted the lock promptly, far sooner
// than the delay (the long TTL), and so is a TryAcquire after that
// waiter's own release.
func (s *suite) testLockDelayRelease(t *testing.T) {
	s.requireLockDelay(t)
	name := lockName(t)
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	la := s.try(t, a, name, backend.WithLockDelay(s.long.Round(time.Second)))

	chB := goAcquire(t, ctx(t, s.prompt+s.long), b, name, backend.WithLockDelay(s.long.Round(time.Second)))
	s.requireQueued(t, a, name, 1)
	start := time.Now()
	release(t, la)
	r := wait(t, chB, s.prompt, "waiter after the holder with a lock-delay released")
	require.NoError(t, r.err)
	t.Logf("granted %v after the release (lock-delay %v)", r.at.Sub(start), s.long.Round(time.Second))
	release(t, r.lease)
	lc := s.try(t, c, name)
	release(t, lc)
}

// testLockDelayZero: WithLockDelay(0) changes nothing: a crashed holder's
// lock is granted once its lease expired, as in HolderCrash.
func (s *suite) testLockDelayZero(t *testing.T) {
	name := lockName(t)
	a, b := s.locker(t), s.locker(t)
	la := s.try(t, a, name, s.shortTTL(backend.WithLockDelay(0))...)

	chB := goAcquire(t, ctx(t, s.expiry), b, name, backend.WithLockDelay(0))
	requireWaiting(t, chB, s.settle, "waiter while the holder lives")
	s.h.Crash(t, a)
	r := wait(t, chB, s.expiry, "waiter after the holder crashed")
	require.NoError(t, r.err)
	assert.Greater(t, r.lease.Token(), la.Token())
	requireNotBefore(t, r.at, la)
	release(t, r.lease)
}
