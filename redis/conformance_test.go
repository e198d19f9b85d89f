package redis

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/locktest"
)

// harness runs the shared suite over the shared server: one client per
// Locker; Crash closes that client (nothing is released, so its locks expire
// with their TTL); Revoke deletes the grant's lock key through a separate
// client after checking that it holds the grant's token.
type harness struct {
	prefix string
	admin  *goredis.Client

	crashers locktest.Crashers
}

func (h *harness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	l, err := NewWithConfig(c, Config{Prefix: h.prefix}, opts...)
	require.NoError(t, err)
	h.crashers.Add(t, l, c.Close)
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

// RevokeWaiters removes every queue entry of name and wakes its waiter (a
// message naming it on its Locker's wake channel), whose next attempt then
// finds the entry gone; without the message it would find out from its
// next renewal.
func (h *harness) RevokeWaiters(t testing.TB, name string) int {
	t.Helper()
	ctx := tctx(t, 10*time.Second)
	k := keysOf(h.prefix, name)
	owners, err := h.admin.ZRange(ctx, k.queue, 0, -1).Result()
	require.NoError(t, err)
	for _, o := range owners {
		require.NoError(t, h.admin.ZRem(ctx, k.queue, o).Err())
		require.NoError(t, h.admin.ZRem(ctx, k.expiry, o).Err())
		lockerID, _, _ := strings.Cut(o, ".")
		require.NoError(t, h.admin.Publish(ctx, wakeChannel(h.prefix, lockerID), o).Err())
	}
	return len(owners)
}

var _ conformance.WaiterRevoker = (*harness)(nil)

func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{FIFO: true, TTL: 500 * time.Millisecond, MinTTL: MinTTL}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, &harness{prefix: testPrefix(t), admin: newClient(t, srv.Addr())})
}
