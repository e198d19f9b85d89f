package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// CutWaiter checks an Acquire queued behind a holder when a partition that
// drops everything (faultproxy's Partition: nothing is closed, nothing
// passes) cuts its Locker off from the backend: it never reports
// ErrNotAcquired, which would say that someone else holds the lock, but
// ErrUnavailable, within the waiter's TTL of the cut (its local deadline,
// sent + TTL - drift of its last answered renewal, comes no later), or as
// soon as its context ends once a renewal has gone unanswered past the
// wait's patience (TTL/6) or failed.
//
// other holds the lock (over a connection of its own); newLocker returns a
// Locker whose connections go through a proxy, and the function that
// partitions it (returning heal). ttl is the waiter's TTL.
func CutWaiter(t *testing.T, other *backend.Locker, ttl time.Duration,
	newLocker func(t *testing.T) (l *backend.Locker, partition func() (heal func()))) {
	t.Helper()
	const margin = 2 * time.Second // a busy machine's scheduling
	wait := func(t *testing.T, name string, ctxAfterCut time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+3*ttl)
		defer cancel()
		blocker, err := other.TryAcquire(ctx, name, backend.WithTTL(max(30*time.Second, 10*ttl)))
		require.NoError(t, err)
		defer func() { _ = blocker.Release(context.Background()) }()
		l, partition := newLocker(t)

		type result struct {
			ls  *backend.Lease
			err error
			at  time.Time
		}
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		waiting := make(chan result, 1)
		go func() {
			ls, err := l.Acquire(wctx, name, backend.WithTTL(ttl))
			waiting <- result{ls, err, time.Now()}
		}()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, err := other.Status(ctx, name)
			require.NoError(t, err)
			if len(st.Waiters) > 0 {
				break
			}
			require.True(t, time.Now().Before(end), "the Acquire never queued")
		}
		heal := partition()
		defer heal()
		cut := time.Now()
		if ctxAfterCut > 0 {
			time.AfterFunc(ctxAfterCut, wcancel)
		}
		select {
		case r := <-waiting:
			took := r.at.Sub(cut)
			t.Logf("cut-off waiter returned %v after the cut (TTL %v): %v", took, ttl, r.err)
			require.Nil(t, r.ls, "granted through a partition")
			require.ErrorIs(t, r.err, backend.ErrUnavailable, "a backend that stopped answering is not a held lock")
			require.NotErrorIs(t, r.err, backend.ErrNotAcquired)
			assert.Less(t, took, ttl+margin, "the waiter's deadline bounds the wait")
		case <-time.After(ttl + 2*margin):
			require.Fail(t, "the cut-off waiter did not return within its TTL")
		}
	}
	t.Run("UntilDeadline", func(t *testing.T) { wait(t, "cut-waiter-deadline", 0) })
	// The caller gives up before the deadline, once the first renewal
	// since the cut has gone unanswered for longer than the wait's
	// patience (TTL/6). The waiter queued just before the cut, so its
	// last answered request was sent then: its renewal goes out TTL/3
	// after the cut, is taken as unanswered from TTL/2, and its deadline
	// is TTL - drift after the cut, with TTL/4 of room on either side of
	// the context's end. (Had the deadline come first, the answer would
	// still have to be ErrUnavailable.)
	t.Run("ContextEnds", func(t *testing.T) { wait(t, "cut-waiter-ctx", ttl*3/4) })
}
