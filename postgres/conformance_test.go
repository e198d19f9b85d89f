package postgres

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/locktest"
)

// harness runs the shared suite in one database of the shared cluster: one
// pool per Locker, through a fault proxy of its own (the listener's
// connection too: it copies the pool's settings). Crash cuts the proxy for
// good, so nothing is released and the Locker's locks expire with their
// TTL (closing the pool would be told, backend.ErrClientClosed, which a
// crashed process is not; closing it alone would leave the listener to
// hear a grant for a crashed waiter); Partition holds every byte both ways
// until healed. Revoke and RevokeWaiters use a separate Locker's
// Revoke and RevokeID.
type harness struct {
	dsn     string
	prefix  string
	revoker *backend.Locker

	crashers locktest.Crashers
	mu       sync.Mutex
	proxies  map[*backend.Locker]*faultproxy.Proxy
}

func (h *harness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
	t.Helper()
	proxy, err := faultproxy.Start(net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.Port())))
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	pc, err := pgxpool.ParseConfig(h.dsn)
	require.NoError(t, err)
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p16, _ := strconv.ParseUint(port, 10, 16)
	pc.ConnConfig.Host, pc.ConnConfig.Port = host, uint16(p16)
	p, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	l, err := New(p, Config{Prefix: h.prefix}, opts...)
	require.NoError(t, err)
	h.mu.Lock()
	h.proxies[l] = proxy
	h.mu.Unlock()
	h.crashers.Add(t, l, func() error {
		proxy.Cut()
		return nil
	})
	t.Cleanup(func() {
		_ = l.Close() // fails for a crashed Locker; its locks expire
		p.Close()
		h.mu.Lock()
		delete(h.proxies, l)
		h.mu.Unlock()
	})
	return l
}

func (h *harness) Crash(t testing.TB, l *backend.Locker) { h.crashers.Crash(t, l) }

// Partition cuts l off from the server, its connections open, until heal.
func (h *harness) Partition(t testing.TB, l *backend.Locker) (heal func()) {
	h.mu.Lock()
	proxy := h.proxies[l]
	h.mu.Unlock()
	require.NotNil(t, proxy, "Partition of a Locker this harness did not make")
	proxy.Partition()
	return proxy.Heal
}

var _ conformance.Partitioner = (*harness)(nil)

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
	conformance.Run(t, &harness{dsn: dsn, prefix: prefix, revoker: locker(t, dsn, Config{Prefix: prefix}),
		proxies: map[*backend.Locker]*faultproxy.Proxy{}})
}
