package zookeeper

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// harness runs the shared suite over the shared server. Every Locker dials
// its sessions through a TCP proxy of its own; Crash kills that proxy, so
// the Locker's sessions are cut without being closed (nothing is deleted)
// and expire on the server after their timeout. Revoke deletes a lease's
// node (found by czxid) from a separate session.
type harness struct {
	prefix string
	admin  *zk.Conn

	crashers locktest.Crashers
}

func (h *harness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
	t.Helper()
	p := zktest.NewProxy(t, srv.Addr())
	l := dialLocker(t, p.Addr(), h.prefix, suiteTTL, opts...)
	h.crashers.Add(t, l, func() error { p.Kill(); return nil })
	return l
}

func (h *harness) Crash(t testing.TB, l *backend.Locker) { h.crashers.Crash(t, l) }

func (h *harness) Revoke(t testing.TB, ls *backend.Lease) {
	t.Helper()
	path, _ := nodeOf(t, h.admin, h.prefix, ls)
	require.NoError(t, h.admin.Delete(path, -1))
}

// RevokeWaiters deletes every lock node of name but the oldest (the
// holder's).
func (h *harness) RevokeWaiters(t testing.TB, name string) int {
	t.Helper()
	nodes := lockNodes(t, h.admin, h.prefix, name)
	for _, n := range nodes[min(1, len(nodes)):] {
		require.NoError(t, h.admin.Delete(lockDir(h.prefix, name)+"/"+n, -1))
	}
	return max(0, len(nodes)-1)
}

var _ conformance.WaiterRevoker = (*harness)(nil)

// Capabilities are what probeSuite reads from the test server (tickTime
// 200ms: sessions of 400ms to 120s are granted as asked), without asking it.
func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{FIFO: true, TTL: suiteTTL, MinTTL: MinTTL, MaxTTL: zktest.MaxSessionTimeout, LockDelay: true}
}

func TestConformance(t *testing.T) {
	t.Parallel() // lock names of its own; beside the package's other long tests
	conformance.Run(t, &harness{prefix: testPrefix(t), admin: srv.Connect(t, 10*time.Second)})
}
