package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// testDeadline: the local deadline is in the future while the lease is held,
// never later than the send time of the request that started the lease's
// clock plus TTL minus the drift margin, and Refresh moves it forward by the
// same rule.
func (s *suite) testDeadline(t *testing.T) {
	a := s.locker(t)

	t.Run("Bounds", func(t *testing.T) {
		drift := s.short / 10
		for _, tc := range []struct {
			name string
			wait bool
		}{{"TryAcquire", false}, {"Acquire", true}} {
			t.Run(tc.name, func(t *testing.T) {
				opts := s.shortTTL(backend.WithAutoRenew(false), backend.WithDriftMargin(drift))
				var ls *backend.Lease
				if tc.wait {
					ls = s.acquire(t, a, lockName(t), s.prompt, opts...)
				} else {
					ls = s.try(t, a, lockName(t), opts...)
				}
				returned := time.Now()
				d := ls.Deadline()
				// Every request was sent before Acquire returned.
				assert.False(t, d.After(returned.Add(s.short-drift)),
					"deadline %v after return + TTL - drift", d.Sub(returned))
				assert.True(t, d.After(returned), "deadline of a fresh lease is in the past")
				release(t, ls)
			})
		}
	})

	t.Run("Refresh", func(t *testing.T) {
		drift := s.short / 10
		ls := s.try(t, a, lockName(t), s.shortTTL(backend.WithAutoRenew(false), backend.WithDriftMargin(drift))...)
		// 11 * TTL/10: past the TTL. Each Refresh must be answered
		// within TTL - drift - TTL/10 of the last one's send (1.6s with
		// the suite's 2s): a loaded machine may take over a second.
		for range 11 {
			before := ls.Deadline()
			time.Sleep(s.short / 10)
			sent := time.Now()
			require.NoError(t, ls.Refresh(ctx(t, s.prompt)))
			returned := time.Now()
			d := ls.Deadline()
			assert.True(t, d.After(before), "Refresh must move the deadline forward")
			assert.False(t, d.Before(sent.Add(s.short-drift)), "deadline %v before send + TTL - drift", sent.Add(s.short-drift).Sub(d))
			assert.False(t, d.After(returned.Add(s.short-drift)), "deadline %v after return + TTL - drift", d.Sub(returned))
		}
		// Refresh keeps a lease without auto-renew alive past its TTL.
		require.NoError(t, ls.Err())
		release(t, ls)
	})

	t.Run("DefaultDrift", func(t *testing.T) {
		ls := s.try(t, a, lockName(t), s.shortTTL(backend.WithAutoRenew(false))...)
		returned := time.Now()
		d := ls.Deadline()
		assert.False(t, d.After(returned.Add(s.short)), "deadline %v after return + TTL", d.Sub(returned))
		assert.True(t, d.After(returned))
		release(t, ls)
	})
}
