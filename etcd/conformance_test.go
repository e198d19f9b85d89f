package etcd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/locktest"
)

// harness runs the shared suite over the embedded server: one client per
// Locker, through a fault proxy of its own; Crash cuts that proxy for good
// (nothing is released or revoked, so its locks expire with their TTL; a
// closed client would be told, backend.ErrClientClosed, which a crashed
// process is not); Revoke revokes the lease behind a grant through a
// separate client.
type harness struct {
	prefix string
	admin  *clientv3.Client

	crashers locktest.Crashers
}

func (h *harness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
	t.Helper()
	c, px := proxiedClient(t)
	l, err := New(c, Config{Prefix: h.prefix}, opts...)
	require.NoError(t, err)
	h.crashers.Add(t, l, func() error { px.Cut(); return nil })
	t.Cleanup(func() {
		_ = l.Close() // fails for a crashed Locker; its locks expire
	})
	return l
}

func (h *harness) Crash(t testing.TB, l *backend.Locker) { h.crashers.Crash(t, l) }

func (h *harness) Revoke(t testing.TB, ls *backend.Lease) {
	t.Helper()
	ctx := tctx(t, 10*time.Second)
	resp, err := h.admin.Get(ctx, nameDir(h.prefix, ls.Name()), clientv3.WithPrefix())
	require.NoError(t, err)
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == int64(ls.Token()) {
			require.NotZero(t, kv.Lease, "key %q has no lease", kv.Key)
			_, err := h.admin.Revoke(ctx, clientv3.LeaseID(kv.Lease))
			require.NoError(t, err)
			return
		}
	}
	require.FailNowf(t, "no key", "no key of %q with create revision %d", ls.Name(), ls.Token())
}

// RevokeWaiters revokes the lease of every key of name but the oldest (the
// holder's).
func (h *harness) RevokeWaiters(t testing.TB, name string) int {
	t.Helper()
	ctx := tctx(t, 10*time.Second)
	resp, err := h.admin.Get(ctx, nameDir(h.prefix, name), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	require.NoError(t, err)
	n := 0
	for i, kv := range resp.Kvs {
		if i == 0 {
			continue // the holder
		}
		_, err := h.admin.Revoke(ctx, clientv3.LeaseID(kv.Lease))
		require.NoError(t, err)
		n++
	}
	return n
}

var _ conformance.WaiterRevoker = (*harness)(nil)

// Capabilities are the scheme's declaration (suiteProfile): 2s is the
// embedded server's minimum lease TTL too (default election settings).
func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.CapabilitiesOf(suiteProfile)
}

func TestConformance(t *testing.T) {
	conformance.Run(t, &harness{prefix: testPrefix(t), admin: client(t)})
}
