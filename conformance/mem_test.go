package conformance_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/conformance"
)

// memHarness runs the suite over an in-process mem server: one Conn per
// Locker, Crash cuts it, Revoke drops the lease on the server.
type memHarness struct {
	srv   *mem.Server
	mu    sync.Mutex
	conns map[*backend.Locker]*mem.Conn
}

func (h *memHarness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
	t.Helper()
	conn := h.srv.Connect()
	l, err := mem.New(conn, opts...)
	require.NoError(t, err)
	h.mu.Lock()
	h.conns[l] = conn
	h.mu.Unlock()
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Logf("closing a Locker at the end of the test: %v", err)
		}
	})
	return l
}

func (h *memHarness) Crash(t testing.TB, l *backend.Locker) {
	h.mu.Lock()
	conn := h.conns[l]
	h.mu.Unlock()
	require.NotNil(t, conn, "Crash of a Locker this harness did not make")
	conn.Cut()
}

func (h *memHarness) Revoke(t testing.TB, ls *backend.Lease) {
	require.True(t, h.srv.Revoke(ls.Name(), ls.Token()), "no lease %q with token %d on the server", ls.Name(), ls.Token())
}

// RevokeWaiters finds the waiters by token: mem hands out tokens from one
// growing counter at enqueue time, so every waiter queued behind the holder
// has a token above the holder's.
func (h *memHarness) RevokeWaiters(t testing.TB, name string) int {
	holder := h.srv.Holder(name)
	require.NotZero(t, holder, "no holder of %q", name)
	n := 0
	for tok := holder + 1; h.srv.Queued(name) > 1 && tok < holder+1_000_000; tok++ {
		if h.srv.Revoke(name, tok) {
			n++
		}
	}
	return n
}

func (h *memHarness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{FIFO: true, TTL: 300 * time.Millisecond, MinTTL: mem.MinTTL}
}

func TestMem(t *testing.T) {
	conformance.Run(t, &memHarness{srv: mem.NewServer(), conns: make(map[*backend.Locker]*mem.Conn)})
}
