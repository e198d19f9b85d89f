package main

import (
	"context"
	"fmt"
	neturl "net/url"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/conformance"
)

// fencelock conformance mem:// runs the suite against the mem adapter of
// this binary: mem:// is in-process, so the URL harness (a TCP proxy in
// front of each host) cannot reach it, and the child that runs the suite
// uses memHarness instead, over a server of its own (the URL's name
// reaches no other process). Crash cuts a Locker's connection to that
// server; there is no network to partition, so the suite's Partitioned
// case does not run, as in the mem package's own run of it.

// isMemURL reports whether rawURL, which backend.CheckURL has accepted, is
// a mem:// URL.
func isMemURL(rawURL string) bool {
	u, err := neturl.Parse(rawURL)
	return err == nil && u.Scheme == "mem"
}

// checkMemURL refuses what a mem:// URL could carry that the suite would
// ignore: query parameters (the suite gives each lease its own TTL).
func checkMemURL(rawURL string) error {
	u, err := neturl.Parse(rawURL)
	if err != nil || u.RawQuery != "" || u.ForceQuery {
		return fmt.Errorf("%w: conformance: mem:// takes no query parameters here: the suite sets its own TTLs (-ttl, -min-ttl)", backend.ErrInvalidURL)
	}
	return nil
}

// memCapabilities are the capabilities the mem scheme declares.
func memCapabilities(ctx context.Context) (conformance.Capabilities, error) {
	s, ok := driver.Lookup("mem")
	if !ok || s.Suite == nil {
		return conformance.Capabilities{}, fmt.Errorf("%w: the mem scheme declares no conformance profile", backend.ErrInvalidURL)
	}
	p, err := s.Suite(ctx, &neturl.URL{Scheme: "mem"})
	if err != nil {
		return conformance.Capabilities{}, err
	}
	return conformance.CapabilitiesOf(p), nil
}

// memHarness runs the suite over an in-process mem server: one connection
// per Locker, which Crash cuts; Revoke drops the lease on the server.
type memHarness struct {
	srv   *mem.Server
	caps  conformance.Capabilities
	mu    sync.Mutex
	conns map[*backend.Locker]*mem.Conn
}

var _ conformance.WaiterRevoker = (*memHarness)(nil)

func newMemHarness(caps conformance.Capabilities) *memHarness {
	return &memHarness{srv: mem.NewServer(), caps: caps, conns: make(map[*backend.Locker]*mem.Conn)}
}

// NewLocker implements conformance.Harness.
func (h *memHarness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
	t.Helper()
	conn := h.srv.Connect()
	l, err := mem.New(conn, opts...)
	if err != nil {
		t.Fatalf("mem.New: %v", err)
	}
	h.mu.Lock()
	h.conns[l] = conn
	h.mu.Unlock()
	t.Cleanup(func() {
		h.mu.Lock()
		delete(h.conns, l)
		h.mu.Unlock()
		if err := l.Close(); err != nil {
			t.Logf("closing a Locker at the end of the test: %v", err)
		}
	})
	return l
}

// Crash implements conformance.Harness: it cuts the Locker's connection.
func (h *memHarness) Crash(t testing.TB, l *backend.Locker) {
	t.Helper()
	h.mu.Lock()
	conn := h.conns[l]
	h.mu.Unlock()
	if conn == nil {
		t.Fatalf("Crash of a Locker this harness did not make")
	}
	conn.Cut()
}

// Revoke implements conformance.Harness.
func (h *memHarness) Revoke(t testing.TB, ls *backend.Lease) {
	t.Helper()
	if !h.srv.Revoke(ls.Name(), ls.Token()) {
		t.Fatalf("no lease %q with token %d on the server", ls.Name(), ls.Token())
	}
}

// RevokeWaiters implements conformance.WaiterRevoker.
func (h *memHarness) RevokeWaiters(t testing.TB, name string) int {
	t.Helper()
	admin, err := mem.New(h.srv.Connect())
	if err != nil {
		t.Fatalf("mem.New: %v", err)
	}
	defer admin.Close()
	return conformance.RevokeWaitersByID(t, admin, name)
}

// Capabilities implements conformance.Harness.
func (h *memHarness) Capabilities() conformance.Capabilities { return h.caps }
