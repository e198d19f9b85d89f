package postgres

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/locktest"
)

// TestCutWaiter: a waiter cut off by a partition that drops everything
// (its pool's connections and its listener's) returns ErrUnavailable,
// never ErrNotAcquired, within its TTL.
func TestCutWaiter(t *testing.T) {
	dsn := srv.NewDatabase(t)
	prefix := testPrefix(t)
	other := locker(t, dsn, Config{Prefix: prefix})
	locktest.CutWaiter(t, other, 6*time.Second, func(t *testing.T) (*backend.Locker, func() func()) {
		px, err := faultproxy.Start(net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.Port())))
		require.NoError(t, err)
		t.Cleanup(px.Close)
		pc, err := pgxpool.ParseConfig(dsn)
		require.NoError(t, err)
		host, port, _ := net.SplitHostPort(px.Addr())
		p16, _ := strconv.ParseUint(port, 10, 16)
		pc.ConnConfig.Host, pc.ConnConfig.Port = host, uint16(p16)
		p, err := pgxpool.NewWithConfig(context.Background(), pc)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		l, err := New(p, Config{Prefix: prefix})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l, func() func() { px.Partition(); return px.Heal }
	})
}
