package zookeeper

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// TestWaiterServerGone: a waiter queued behind a holder whose server then
// dies reports, when its context ends, that the backend stopped answering
// (ErrUnavailable), not that someone else holds the lock (ErrNotAcquired):
// a job that skips its work when the lock is held must not skip it
// silently when ZooKeeper is down.
func TestWaiterServerGone(t *testing.T) {
	t.Parallel() // a server of its own
	s := zktest.Start(t)
	prefix := testPrefix(t)
	la := dialLocker(t, s.Addr(), prefix, 20*time.Second)
	lb := dialLocker(t, s.Addr(), prefix, 20*time.Second)
	locktest.RequireUnavailableWhenServerGone(t, la, lb, "n", s.Stop)
}
