package etcd

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/locktest"
)

// TestCutWaiter: a waiter cut off by a partition that drops everything
// returns ErrUnavailable, never ErrNotAcquired, within its TTL.
func TestCutWaiter(t *testing.T) {
	prefix := testPrefix(t)
	locktest.CutWaiter(t, locker(t, prefix), 6*time.Second, func(t *testing.T) (*backend.Locker, func() func()) {
		c, px := proxiedClient(t)
		l, err := New(c, Config{Prefix: prefix})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l, func() func() { px.Partition(); return px.Heal }
	})
}

// proxiedClient returns a client of the shared server through a fault proxy
// of its own, both closed at cleanup.
func proxiedClient(t testing.TB) (*clientv3.Client, *faultproxy.Proxy) {
	t.Helper()
	px, err := faultproxy.Start(strings.TrimPrefix(srv.Endpoints()[0], "http://"))
	require.NoError(t, err)
	t.Cleanup(px.Close)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + px.Addr()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, px
}
