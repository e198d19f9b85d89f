package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// testCutWaiter: an Acquire queued behind a holder when a partition cuts
// its Locker off (nothing passes, nothing is closed) is never told that
// the lock is held (ErrNotAcquired): it returns ErrUnavailable by its
// local deadline (within about its TTL of the cut: the deadline is the
// send time of its last answered renewal + TTL - drift), or, if its
// context ends first, once a renewal has gone unanswered for TTL/6. The
// waiter's TTL is 3*TTL, so that the context's end (3/4 of it after the
// cut) is TTL/4 away both from the unanswered renewal (TTL/3 after the
// cut, since the waiter had just queued, plus TTL/6) and from the
// deadline. It needs the optional Partitioner.
func (s *suite) testCutWaiter(t *testing.T, p Partitioner) {
	ttl := 3 * s.short
	for _, c := range []struct {
		name  string
		ctxIn time.Duration // after the cut; 0: none
	}{{"UntilDeadline", 0}, {"ContextEnds", ttl * 3 / 4}} {
		t.Run(c.name, func(t *testing.T) {
			name := lockName(t)
			a, b := s.locker(t), s.locker(t)
			s.try(t, b, name)
			wctx, cancel := context.WithCancel(ctx(t, 2*ttl+s.expiry))
			defer cancel()
			ch := goAcquire(t, wctx, a, name, backend.WithTTL(ttl))
			s.requireQueued(t, b, name, 1)
			requireWaiting(t, ch, 0, "the waiter before the cut")
			heal := healOnce(t, p.Partition(t, a))
			defer heal()
			cut := time.Now()
			if c.ctxIn > 0 {
				stop := time.AfterFunc(c.ctxIn, cancel)
				defer stop.Stop()
			}
			r := wait(t, ch, ttl+s.prompt, "the cut-off waiter")
			t.Logf("returned %v after the cut (TTL %v): %v", r.at.Sub(cut), ttl, r.err)
			require.Nil(t, r.lease, "granted through a partition")
			require.ErrorIs(t, r.err, backend.ErrUnavailable, "a backend that stopped answering is not a held lock")
			require.NotErrorIs(t, r.err, backend.ErrNotAcquired)
		})
	}
}
