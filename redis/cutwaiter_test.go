package redis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/locktest"
)

// TestCutWaiter: a waiter cut off by a partition that drops everything
// returns ErrUnavailable, never ErrNotAcquired, within its TTL.
func TestCutWaiter(t *testing.T) {
	prefix := testPrefix(t)
	other := locker(t, srv.Addr(), Config{Prefix: prefix})
	locktest.CutWaiter(t, other, 6*time.Second, func(t *testing.T) (*backend.Locker, func() func()) {
		px, err := faultproxy.Start(srv.Addr())
		require.NoError(t, err)
		t.Cleanup(px.Close)
		l := locker(t, px.Addr(), Config{Prefix: prefix})
		return l, func() func() { px.Partition(); return px.Heal }
	})
}
