package conformance_test

import (
	"context"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
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

// RevokeWaiters revokes the waiters by the ids Status shows.
func (h *memHarness) RevokeWaiters(t testing.TB, name string) int {
	admin, err := mem.New(h.srv.Connect())
	require.NoError(t, err)
	defer admin.Close()
	return conformance.RevokeWaitersByID(t, admin, name)
}

// Capabilities are what the mem scheme declares.
func (h *memHarness) Capabilities() conformance.Capabilities {
	s, ok := driver.Lookup("mem")
	if !ok || s.Suite == nil {
		panic("the mem scheme declares no conformance profile")
	}
	p, err := s.Suite(context.Background(), &url.URL{Scheme: "mem"})
	if err != nil {
		panic(err)
	}
	return conformance.CapabilitiesOf(p)
}

func TestMem(t *testing.T) {
	conformance.Run(t, &memHarness{srv: mem.NewServer(), conns: make(map[*backend.Locker]*mem.Conn)})
}
