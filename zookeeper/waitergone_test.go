package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/zktest"
)

// TestWaiterServerGone: a waiter queued behind a holder whose server then
// dies reports, when its context ends, that the backend stopped answering
// (ErrUnavailable), not that someone else holds the lock (ErrNotAcquired):
// a job that skips its work when the lock is held must not skip it
// silently when ZooKeeper is down.
func TestWaiterServerGone(t *testing.T) {
	s := zktest.Start(t)
	prefix := testPrefix(t)
	la := dialLocker(t, s.Addr(), prefix, 20*time.Second)
	lb := dialLocker(t, s.Addr(), prefix, 20*time.Second)
	_, err := la.TryAcquire(tctx(t, 10*time.Second), "n")
	require.NoError(t, err)
	ch := goAcquire(tctx(t, 4*time.Second), lb, "n")
	requireBlocked(t, ch, 500*time.Millisecond)
	s.Stop()
	r := waitAcquired(t, ch, 20*time.Second)
	require.ErrorIs(t, r.Err, backend.ErrUnavailable)
	require.ErrorIs(t, r.Err, context.DeadlineExceeded)
	require.NotErrorIs(t, r.Err, backend.ErrNotAcquired)
	// Nothing to clean up on a dead server: close both at once.
	for _, l := range []*backend.Locker{la, lb} {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = l.Shutdown(sctx)
		cancel()
	}
}
