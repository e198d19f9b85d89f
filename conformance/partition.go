package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// testPartitioned: an Acquire by a Locker that a network partition cuts
// off from the backend (its connections hang, nothing fails fast) returns
// soon after its context ends, with ErrNotAcquired and the context's error,
// rather than after the client's own timeouts or the lease's TTL. What the
// attempt may have queued in the backend (a request held in the network
// can still land after the partition heals) is gone within the TTL: another
// Locker is granted the lock. And the Locker works again once it heals. It
// needs the optional Partitioner.
func (s *suite) testPartitioned(t *testing.T, p Partitioner) {
	name := lockName(t)
	a, b := s.locker(t), s.locker(t)
	release(t, s.try(t, a, name)) // a is connected, with whatever it keeps between acquisitions

	heal := p.Partition(t, a)
	healed := false
	defer func() {
		if !healed {
			heal()
		}
	}()
	wctx, cancel := context.WithTimeout(context.Background(), s.settle)
	defer cancel()
	start := time.Now()
	ls, err := a.Acquire(wctx, name) // the long TTL, which the clean-up must not wait out
	took := time.Since(start)
	require.Nil(t, ls, "granted through a partition")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, s.settle+s.prompt, "Acquire returned %v after its context ended", took-s.settle)

	heal()
	healed = true
	lb := s.acquire(t, b, name, s.expiry)
	release(t, lb)
	release(t, s.acquire(t, a, name, s.expiry))
}
