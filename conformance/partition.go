package conformance

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// testPartitioned: a Locker that a network partition cuts off from the
// backend (its connections hang, nothing fails fast) keeps to its callers'
// contexts. It needs the optional Partitioner.
//   - Acquire returns soon after its context ends, with ErrUnavailable and
//     the context's error, rather than after the client's own timeouts or
//     the lease's TTL; what the attempt may have queued in the backend (a
//     request held in the network can still land after the partition
//     heals, after the attempt's clean-up) is gone within the attempt's
//     TTL at the latest, so another Locker is granted the lock; and the
//     Locker works again once the partition heals.
//   - Release returns soon after its context ends, with an error; once the
//     partition heals, Release can be called again, and the lock is then
//     free at once (a failed release can be retried, CURATOR-678).
func (s *suite) testPartitioned(t *testing.T, p Partitioner) {
	t.Run("Acquire", func(t *testing.T) {
		name := lockName(t)
		a, b := s.locker(t), s.locker(t)
		release(t, s.try(t, a, name)) // a is connected, with whatever it keeps between acquisitions

		// A TTL well above the prompt bound, which the clean-up must not
		// wait out, and which bounds how long a request of the attempt
		// that lands after the partition heals can hold the lock.
		ttl := 2 * s.prompt
		heal := healOnce(t, p.Partition(t, a))
		wctx, cancel := context.WithTimeout(context.Background(), s.settle)
		defer cancel()
		start := time.Now()
		ls, err := a.Acquire(wctx, name, backend.WithTTL(ttl))
		took := time.Since(start)
		require.Nil(t, ls, "granted through a partition")
		require.ErrorIs(t, err, backend.ErrUnavailable, "no answer is not a held lock")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, took, s.settle+s.prompt, "Acquire returned %v after its context ended", took-s.settle)

		heal()
		release(t, s.acquire(t, b, name, ttl+s.prompt))
		// A request of the cut-off attempt may land only now, after b's
		// turn, and hold the lock until its TTL ends (seen under load on
		// PostgreSQL: a was queued behind it past the prompt bound).
		release(t, s.acquire(t, a, name, ttl+s.prompt))
	})
	t.Run("Release", func(t *testing.T) {
		name := lockName(t)
		a, b := s.locker(t), s.locker(t)
		la := s.try(t, a, name)

		heal := healOnce(t, p.Partition(t, a))
		rctx, cancel := context.WithTimeout(context.Background(), s.settle)
		defer cancel()
		start := time.Now()
		err := la.Release(rctx)
		took := time.Since(start)
		require.Error(t, err, "released through a partition")
		assert.Less(t, took, s.settle+s.prompt, "Release returned %v after its context ended", took-s.settle)

		heal()
		// The first Release may have got through after all (the network
		// held its request): then the second finds the key gone, which it
		// cannot tell from a lost lease. Either way the lock is free.
		if err := la.Release(ctx(t, s.prompt)); err != nil {
			require.ErrorIs(t, err, backend.ErrLeaseLost, "Release again once the partition healed")
		}
		release(t, s.try(t, b, name))
	})
}

// healOnce returns heal, which the test's cleanup also calls unless the
// test did.
func healOnce(t *testing.T, heal func()) func() {
	var once sync.Once
	h := func() { once.Do(heal) }
	t.Cleanup(h)
	return h
}
