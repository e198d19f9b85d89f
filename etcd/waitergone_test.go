package etcd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/locktest"
)

// TestWaiterServerGone: a waiter queued behind a holder whose server then
// stops reports, when its context ends, that the backend stopped answering
// (ErrUnavailable), not that someone else holds the lock (ErrNotAcquired):
// a job that skips its work when the lock is held must not skip it
// silently when etcd is down.
func TestWaiterServerGone(t *testing.T) {
	s := etcdtest.Start(t)
	prefix := testPrefix(t)
	la, err := New(s.NewClient(t), Config{Prefix: prefix})
	require.NoError(t, err)
	lb, err := New(s.NewClient(t), Config{Prefix: prefix})
	require.NoError(t, err)
	locktest.RequireUnavailableWhenServerGone(t, la, lb, "n", s.Stop, backend.WithTTL(30*time.Second))
}
