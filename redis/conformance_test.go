package redis

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/locktest"
)

// harness runs the shared suite over the shared server: one client per
// Locker, through a fault proxy of its own; Crash cuts that proxy for good
// (nothing is released, so its locks expire with their TTL; a closed client
// would be told, backend.ErrClientClosed, which a crashed process is not); Revoke deletes the grant's lock key through a separate
// client after checking that it holds the grant's token; RevokeWaiters uses
// a separate Locker's RevokeID.
type harness struct {
	prefix  string
	admin   *goredis.Client
	revoker *backend.Locker // for RevokeWaiters

	crashers locktest.Crashers
}

func (h *harness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
	t.Helper()
	px, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(px.Close)
	c := goredis.NewClient(&goredis.Options{Addr: px.Addr()})
	l, err := New(c, Config{Prefix: h.prefix}, opts...)
	require.NoError(t, err)
	h.crashers.Add(t, l, func() error { px.Cut(); return nil })
	t.Cleanup(func() {
		_ = l.Close() // fails for a crashed Locker; its locks expire
		_ = c.Close()
	})
	return l
}

func (h *harness) Crash(t testing.TB, l *backend.Locker) { h.crashers.Crash(t, l) }

func (h *harness) Revoke(t testing.TB, ls *backend.Lease) {
	t.Helper()
	ctx := tctx(t, 10*time.Second)
	key := keysOf(h.prefix, ls.Name()).lock
	v, err := h.admin.Get(ctx, key).Result()
	require.NoError(t, err, "lock key %q", key)
	require.True(t, strings.HasSuffix(v, ":"+ls.Token().String()), "lock key %q holds %q, not token %v", key, v, ls.Token())
	require.NoError(t, h.admin.Del(ctx, key).Err())
}

// RevokeWaiters revokes the waiters by the ids Status shows, with
// RevokeID.
func (h *harness) RevokeWaiters(t testing.TB, name string) int {
	return conformance.RevokeWaitersByID(t, h.revoker, name)
}

var _ conformance.WaiterRevoker = (*harness)(nil)

// Capabilities are the scheme's declaration (suiteProfile: a 2s TTL, which
// holds on a loaded machine).
func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.CapabilitiesOf(suiteProfile)
}

func TestConformance(t *testing.T) {
	prefix := testPrefix(t)
	conformance.Run(t, &harness{prefix: prefix, admin: newClient(t, srv.Addr()),
		revoker: locker(t, srv.Addr(), Config{Prefix: prefix})})
}
