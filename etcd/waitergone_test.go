package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/etcdtest"
)

// TestWaiterServerGone: a waiter queued behind a holder whose server then
// stops reports, when its context ends, that the backend stopped answering
// (ErrUnavailable), not that someone else holds the lock (ErrNotAcquired):
// a job that skips its work when the lock is held must not skip it
// silently when etcd is down.
func TestWaiterServerGone(t *testing.T) {
	s := etcdtest.Start(t)
	prefix := testPrefix(t)
	la, err := New(s.NewClient(t), prefix)
	require.NoError(t, err)
	lb, err := New(s.NewClient(t), prefix)
	require.NoError(t, err)
	_, err = la.TryAcquire(tctx(t, 10*time.Second), "n", backend.WithTTL(30*time.Second))
	require.NoError(t, err)
	ch := goAcquire(tctx(t, 3*time.Second), lb, "n", backend.WithTTL(30*time.Second))
	requireBlocked(t, ch, 300*time.Millisecond)
	s.Stop()
	r := waitAcquired(t, ch, 20*time.Second)
	require.ErrorIs(t, r.Err, backend.ErrUnavailable)
	require.ErrorIs(t, r.Err, context.DeadlineExceeded)
	require.NotErrorIs(t, r.Err, backend.ErrNotAcquired)
	// Nothing to clean up on a stopped server: close both at once.
	for _, l := range []*backend.Locker{la, lb} {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = l.Shutdown(sctx)
		cancel()
	}
}
