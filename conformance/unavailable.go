package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// returnBound is how soon after its context ends an acquisition through a
// partition must return. Nominally it is the clean-up grace of a failed
// acquisition (100ms) plus a hand-off; the rest is room for a loaded
// two-core CI machine with the race detector on. A client that waited out
// its own timeouts (seconds) fails it.
const returnBound = time.Second

// testUnavailable: a Locker cut off from the backend by a partition cannot
// tell whether a lock is free, and says so: TryAcquire, and an Acquire
// whose context ends before the backend answered, return an error matching
// ErrUnavailable and the context's error, never ErrNotAcquired (which
// would tell a job that someone else holds the lock, so that it skips its
// work), soon after the context ends. A lock held by another Locker still
// gives ErrNotAcquired, not ErrUnavailable, to a Locker that is connected.
// It needs the optional Partitioner.
func (s *suite) testUnavailable(t *testing.T, p Partitioner) {
	name := lockName(t)
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	release(t, s.try(t, a, name)) // a is connected, with whatever it keeps between acquisitions
	lc := s.try(t, c, name)

	// Connected: held is ErrNotAcquired, whether tried or waited for.
	_, err := b.TryAcquire(ctx(t, s.prompt), name)
	require.ErrorIs(t, err, backend.ErrNotAcquired, "TryAcquire of a held lock")
	require.NotErrorIs(t, err, backend.ErrUnavailable, "TryAcquire of a held lock")
	_, err = b.Acquire(ctx(t, s.answered()), name)
	require.ErrorIs(t, err, backend.ErrNotAcquired, "Acquire of a held lock past its deadline")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, backend.ErrUnavailable, "Acquire of a held lock past its deadline")

	// Partitioned: unknown, for a held lock and a free one alike.
	heal := healOnce(t, p.Partition(t, a))
	free := lockName(t)
	for _, tc := range []struct {
		what, name string
		wait       bool
	}{
		{"TryAcquire of a held lock", name, false},
		{"TryAcquire of a free lock", free, false},
		{"Acquire of a held lock", name, true},
		{"Acquire of a free lock", free, true},
	} {
		// A TTL well above the bounds, so that the lease's own deadline
		// does not end the attempt first.
		wctx, cancel := context.WithTimeout(context.Background(), s.settle)
		start := time.Now()
		var ls *backend.Lease
		if tc.wait {
			ls, err = a.Acquire(wctx, tc.name, backend.WithTTL(s.long))
		} else {
			ls, err = a.TryAcquire(wctx, tc.name, backend.WithTTL(s.long))
		}
		took := time.Since(start)
		cancel()
		hold(t, ls)
		t.Logf("%s through a partition: %v after %v", tc.what, err, took)
		require.Nil(t, ls, "%s: granted through a partition", tc.what)
		require.ErrorIs(t, err, backend.ErrUnavailable, tc.what)
		require.NotErrorIs(t, err, backend.ErrNotAcquired, tc.what)
		require.ErrorIs(t, err, context.DeadlineExceeded, tc.what)
		assert.Less(t, took, s.settle+returnBound, "%s returned %v after its context ended", tc.what, took-s.settle)
	}

	heal()
	release(t, lc)
	// What the attempts may have queued is gone by their TTL at the latest;
	// the clean-up usually removes it at once.
	release(t, s.acquire(t, b, name, s.prompt))
	release(t, s.acquire(t, a, free, s.prompt))
}

// testLossWhilePartitioned: a holder cut off by a partition (its renewals
// are sent and hang: nothing answers, nothing fails) fires its loss signal
// at its local deadline, not when a renewal gives up, and before the
// backend grants the lock to a waiter of another Locker. The holder's
// drift margin is TTL/10: the backend cannot grant the lock before the
// holder's TTL has run out on the server, at least the margin after the
// holder's deadline, so the signal must come within the margin. Nominally
// it comes within a timer's latency, a millisecond; the margin (200ms at
// a 2s TTL) is room for a loaded two-core machine with the race detector
// on. A signal that waits for a hung renewal to return is late by the
// client's timeout (hundreds of ms to seconds) or forever. It needs the
// optional Partitioner.
func (s *suite) testLossWhilePartitioned(t *testing.T, p Partitioner) {
	name := lockName(t)
	a, b := s.locker(t), s.locker(t)
	drift := s.short / 10
	la := s.try(t, a, name, s.shortTTL(backend.WithDriftMargin(drift))...)
	lost := make(chan time.Time, 1)
	suspendedFirst := watchSuspended(la)
	go func() {
		<-la.Done()
		lost <- time.Now()
	}()

	heal := healOnce(t, p.Partition(t, a))
	// The waiter notes, as soon as it is granted, whether the holder's
	// signal has fired: an order that no timestamp taken on another
	// goroutine could get wrong on a loaded machine.
	type grant struct {
		lease      *backend.Lease
		err        error
		holderLost bool
		at         time.Time
	}
	chB := make(chan grant, 1)
	bctx := ctx(t, s.expiry+s.prompt)
	go func() {
		ls, err := b.Acquire(bctx, name)
		chB <- grant{ls, err, la.Err() != nil, time.Now()}
	}()
	var lostAt time.Time
	select {
	case lostAt = <-lost:
	case <-time.After(s.expiry):
		require.FailNow(t, "no loss signal", "the partitioned holder's Done did not fire within %v", s.expiry)
	}
	deadline := la.Deadline()
	late := lostAt.Sub(deadline)
	t.Logf("loss signal %v after the local deadline: %v", late, la.Err())
	require.ErrorIs(t, la.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, la.Err(), backend.ErrDeadline, "the loss names its cause")
	assert.True(t, <-suspendedFirst, "Lease.Suspended did not report the silent backend before the loss signal")
	assert.False(t, lostAt.Before(deadline), "the loss signal fired %v before the deadline", -late)
	assert.Less(t, late, drift, "the loss signal fired %v after the local deadline, past the drift margin", late)

	var r grant
	select {
	case r = <-chB:
	case <-time.After(s.expiry + s.prompt):
		require.FailNow(t, "waiter not granted", "the waiter was not granted within %v of the holder's partition", s.expiry+s.prompt)
	}
	require.NoError(t, r.err)
	defer release(t, r.lease)
	assert.Greater(t, r.lease.Token(), la.Token())
	assert.True(t, r.holderLost, "the waiter was granted before the partitioned holder's loss signal fired")
	requireNotBefore(t, r.at, la)
	t.Logf("waiter granted %v after the holder's loss signal", r.at.Sub(lostAt))
	heal()
}

// watchSuspended returns a channel that gets whether ls reported itself
// suspended (Lease.Suspended) before its loss signal fired.
func watchSuspended(ls *backend.Lease) <-chan bool {
	first := make(chan bool, 1)
	go func() {
		for {
			on, changed := ls.Suspended()
			if on {
				first <- ls.Err() == nil
				return
			}
			select {
			case <-changed:
			case <-ls.Done():
				first <- false
				return
			}
		}
	}()
	return first
}

// testSuspendedResumes: a holder cut off by a partition reports itself
// suspended (Lease.Suspended) within about TTL/2, its lease still held,
// and no longer once the partition heals and a renewal gets through; its
// loss signal never fires. The TTL is 5x the suite's, so that the heal
// comes well before the local deadline on a loaded machine (at 3x, a
// ZooKeeper client over TLS, which had dropped its connection, did not
// reconnect in time at a load average of 13).
func (s *suite) testSuspendedResumes(t *testing.T, p Partitioner) {
	name := lockName(t)
	a := s.locker(t)
	ttl := min(5*s.short, s.long)
	la := s.try(t, a, name, backend.WithTTL(ttl))
	on, changed := la.Suspended()
	require.False(t, on, "suspended while the backend answers")

	heal := healOnce(t, p.Partition(t, a))
	cut := time.Now()
	waitSuspended(t, la, changed, true, ttl)
	took := time.Since(cut)
	t.Logf("suspended %v after the partition (TTL %v)", took.Round(time.Millisecond), ttl)
	require.NoError(t, la.Err(), "suspended is not lost")
	_, changed = la.Suspended()

	heal()
	healed := time.Now()
	waitSuspended(t, la, changed, false, ttl)
	t.Logf("resumed %v after the heal", time.Since(healed).Round(time.Millisecond))
	require.NoError(t, la.Err(), "the lease survived the partition")
	require.NoError(t, la.Release(ctx(t, s.prompt)))
}

// waitSuspended waits, at most d, for ls's Suspended to report want, from
// the changed channel it gave last; the loss signal ends the wait as a
// failure.
func waitSuspended(t *testing.T, ls *backend.Lease, changed <-chan struct{}, want bool, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		if on, _ := ls.Suspended(); on == want {
			return
		}
		select {
		case <-changed:
			_, changed = ls.Suspended()
		case <-ls.Done():
			require.FailNow(t, "lease lost", "waiting for Suspended() == %v: %v", want, ls.Err())
		case <-timeout:
			require.FailNow(t, "no change", "Suspended() did not become %v within %v", want, d)
		}
	}
}

// closeSlack is how long past its bound Close or Shutdown may take: the
// ~100ms the Locker allows itself after the context ends, plus room for a
// loaded machine.
const closeSlack = 500 * time.Millisecond

// closeBound is the bound Locker.Close documents.
const closeBound = 5 * time.Second

// testClosePartitioned: closing a Locker cut off by a partition, while it
// holds a lock and an acquisition waits, is bounded: Shutdown returns soon
// after its context ends, with an error, and Close within its documented
// 5s. The locks and queue entries left behind then expire with their TTL.
func (s *suite) testClosePartitioned(t *testing.T, p Partitioner) {
	for _, tc := range []struct {
		what  string
		bound time.Duration
		close func(*backend.Locker) error
	}{
		{"Shutdown", 300 * time.Millisecond, func(l *backend.Locker) error {
			c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			return l.Shutdown(c)
		}},
		{"Close", closeBound, (*backend.Locker).Close},
	} {
		t.Run(tc.what, func(t *testing.T) {
			name := lockName(t)
			a, b := s.locker(t), s.locker(t)
			s.try(t, a, name, s.shortTTL()...)
			s.try(t, a, lockName(t), s.shortTTL()...)
			chA := goAcquire(t, ctx(t, s.long), a, name, s.shortTTL()...) // its queue entry expires too
			requireWaiting(t, chA, s.settle, "a second acquisition through the holder's Locker")

			heal := healOnce(t, p.Partition(t, a))
			start := time.Now()
			err := tc.close(a)
			took := time.Since(start)
			t.Logf("%s of a partitioned Locker: %v: %v", tc.what, took, err)
			assert.Less(t, took, tc.bound+closeSlack, "%s took %v", tc.what, took)
			r := wait(t, chA, s.prompt, "waiter of a closed Locker")
			require.ErrorIs(t, r.err, backend.ErrClosed)
			heal()
			release(t, s.acquire(t, b, name, s.expiry))
		})
	}
}
