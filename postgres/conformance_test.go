package postgres

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/locktest"
)

// harness runs the shared suite in one database of the shared cluster: one
// pool per Locker; Crash cuts every connection of that Locker (its pool's
// and its listener's), refuses new ones and closes the pool, so nothing is
// released and its locks expire with their TTL; Revoke and RevokeWaiters
// use a separate Locker's Revoke and RevokeID.
type harness struct {
	dsn     string
	prefix  string
	revoker *backend.Locker

	crashers locktest.Crashers
}

// conns are the connections of one Locker, and whether it crashed.
type conns struct {
	mu      sync.Mutex
	open    []net.Conn
	crashed bool
}

func (c *conns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return nil, errors.New("crashed")
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err == nil {
		c.open = append(c.open, nc)
	}
	return nc, err
}

func (c *conns) crash() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashed = true
	for _, nc := range c.open {
		_ = nc.Close()
	}
}

func (h *harness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
	t.Helper()
	pc, err := pgxpool.ParseConfig(h.dsn)
	require.NoError(t, err)
	cs := &conns{}
	pc.ConnConfig.DialFunc = cs.dial // the listener's too: it copies the pool's
	p, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	l, err := NewWithConfig(p, Config{Prefix: h.prefix}, opts...)
	require.NoError(t, err)
	h.crashers.Add(t, l, func() error {
		cs.crash()
		p.Close()
		return nil
	})
	t.Cleanup(func() {
		_ = l.Close() // fails for a crashed Locker; its locks expire
		p.Close()
	})
	return l
}

func (h *harness) Crash(t testing.TB, l *backend.Locker) { h.crashers.Crash(t, l) }

// Revoke revokes the grant by its token with the adapter's Revoke.
func (h *harness) Revoke(t testing.TB, ls *backend.Lease) {
	t.Helper()
	found, err := h.revoker.Revoke(tctx(t, 10*time.Second), ls.Name(), ls.Token())
	require.NoError(t, err)
	require.True(t, found, "no live grant of %q with token %v", ls.Name(), ls.Token())
}

// RevokeWaiters revokes the waiters by the ids Status shows, with
// RevokeID.
func (h *harness) RevokeWaiters(t testing.TB, name string) int {
	return conformance.RevokeWaitersByID(t, h.revoker, name)
}

var _ conformance.WaiterRevoker = (*harness)(nil)

// Capabilities are the scheme's declaration (suiteProfile).
func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.CapabilitiesOf(suiteProfile)
}

func TestConformance(t *testing.T) {
	dsn := srv.NewDatabase(t)
	prefix := testPrefix(t)
	conformance.Run(t, &harness{dsn: dsn, prefix: prefix, revoker: locker(t, dsn, Config{Prefix: prefix})})
}
