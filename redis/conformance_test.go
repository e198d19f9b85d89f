package redis

import (
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
)

// harness runs the shared suite over the shared server: one client per
// Locker; Crash closes that client (nothing is released, so its locks expire
// with their TTL); Revoke deletes the grant's lock key through a separate
// client after checking that it holds the grant's token.
type harness struct {
	prefix string
	admin  *goredis.Client

	mu      sync.Mutex
	clients map[*backend.Locker]*goredis.Client
}

func (h *harness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	l, err := NewWithConfig(c, Config{Prefix: h.prefix}, opts...)
	require.NoError(t, err)
	h.mu.Lock()
	h.clients[l] = c
	h.mu.Unlock()
	t.Cleanup(func() {
		_ = l.Close() // fails for a crashed Locker; its locks expire
		_ = c.Close()
		h.mu.Lock()
		delete(h.clients, l)
		h.mu.Unlock()
	})
	return l
}

func (h *harness) Crash(t testing.TB, l *backend.Locker) {
	h.mu.Lock()
	c := h.clients[l]
	h.mu.Unlock()
	require.NotNil(t, c, "Crash of a Locker this harness did not make")
	require.NoError(t, c.Close())
}

func (h *harness) Revoke(t testing.TB, ls *backend.Lease) {
	t.Helper()
	ctx := tctx(t, 10*time.Second)
	key := keysOf(h.prefix, ls.Name()).lock
	v, err := h.admin.Get(ctx, key).Result()
	require.NoError(t, err, "lock key %q", key)
	require.True(t, strings.HasSuffix(v, ":"+ls.Token().String()), "lock key %q holds %q, not token %v", key, v, ls.Token())
	require.NoError(t, h.admin.Del(ctx, key).Err())
}

func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{FIFO: true, TTL: 500 * time.Millisecond, MinTTL: MinTTL}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, &harness{prefix: testPrefix(t), admin: newClient(t, srv.Addr()), clients: make(map[*backend.Locker]*goredis.Client)})
}
