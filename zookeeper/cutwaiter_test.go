package zookeeper

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/locktest"
)

// TestCutWaiter: a waiter cut off by a partition that drops everything
// returns ErrUnavailable, never ErrNotAcquired, within its TTL (its
// session timeout).
func TestCutWaiter(t *testing.T) {
	t.Parallel() // a prefix and proxy of its own
	prefix := testPrefix(t)
	const ttl = 6 * time.Second
	other := dialLocker(t, srv.Addr(), prefix, ttl)
	locktest.CutWaiter(t, other, ttl, func(t *testing.T) (*backend.Locker, func() func()) {
		px, err := faultproxy.Start(srv.Addr())
		require.NoError(t, err)
		t.Cleanup(px.Close)
		l := dialLocker(t, px.Addr(), prefix, ttl)
		return l, func() func() { px.Partition(); return px.Heal }
	})
}
