package conformance

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/dialhook"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// URLHarness runs the suite against the backend at a URL, such as your own
// cluster, with no code of your own: every Locker is opened from the URL
// through its own TCP proxies on 127.0.0.1 (one per host in the URL), so
// that Crash can cut one Locker off and Partition can make its connections
// hang; Revoke and RevokeWaiters go through a
// separate Locker's Revoke, Status and RevokeID, which the backend must
// implement (every adapter in this module does). Import the adapter that
// registers the URL's scheme. The hosts in the URL need explicit ports, and
// TLS schemes that verify the server's name will see 127.0.0.1.
//
//	caps, err := conformance.URLCapabilities(ctx, rawURL) // reachable? and the scheme's declaration
//	...
//	caps.TTL = 5 * time.Second // what you know better, if anything
//	h, err := conformance.NewURLHarness(rawURL, caps)
//	...
//	conformance.Run(t, h)
type URLHarness struct {
	rawURL string
	caps   Capabilities

	mu      sync.Mutex
	admin   *backend.Locker
	proxies map[*backend.Locker]*proxySet // each Locker's, for Crash and Partition
}

// NewURLHarness returns a harness for the backend at rawURL with caps,
// which must be complete: take them from URLCapabilities, which also checks
// that the backend answers, and change what you know better.
func NewURLHarness(rawURL string, caps Capabilities) (*URLHarness, error) {
	if _, err := parseURL(rawURL); err != nil {
		return nil, err
	}
	if err := caps.check(); err != nil {
		return nil, err
	}
	return &URLHarness{rawURL: rawURL, caps: caps}, nil
}

// CheckURL reports, without dialling anything, why the URL harness could
// not run against rawURL: what backend.CheckURL finds wrong with it, a URL
// with no host:port in its authority (mem://, which is in-process, or a
// host given in the query, such as PostgreSQL's host=/tmp), or a host
// without an explicit port (the harness puts a proxy in front of each).
// The errors match backend.ErrInvalidURL and never carry the URL's
// password.
func CheckURL(rawURL string) error {
	if _, err := parseURL(rawURL); err != nil {
		return err
	}
	return backend.CheckURL(rawURL)
}

// CheckCapabilities reports why the suite could not run with c (a TTL
// unset or under MinTTL, a MaxTTL that leaves no room for its long
// leases), as NewURLHarness does, for a harness of one's own.
func CheckCapabilities(c Capabilities) error { return c.check() }

// parseURL parses rawURL and checks that each of its hosts has an
// explicit port (the harness puts a proxy in front of each).
func parseURL(rawURL string) (*url.URL, error) {
	u, err := urlkit.Parse(rawURL) // its errors never echo the URL, nor its password
	if err != nil {
		return nil, err
	}
	switch {
	case u.Scheme == "mem":
		return nil, fmt.Errorf("%w: conformance: mem:// is in-process: the URL harness has no host:port to put a proxy in front of (run the suite over mem.Server in process, or fencelock conformance mem://)", backend.ErrInvalidURL)
	case u.Host == "":
		return nil, fmt.Errorf("%w: conformance: %s: no host:port in the URL (a host given in the query, such as a Unix socket, cannot be proxied): give host:port", backend.ErrInvalidURL, urlkit.Redact(u))
	}
	for _, h := range strings.Split(u.Host, ",") {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return nil, fmt.Errorf("%w: conformance: host %q needs an explicit port", backend.ErrInvalidURL, h)
		}
	}
	return u, nil
}

var _ WaiterRevoker = (*URLHarness)(nil)

// NewLocker implements Harness.
func (h *URLHarness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
	t.Helper()
	u, err := url.Parse(h.rawURL)
	require.NoError(t, err)
	proxies := &proxySet{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if dialsThroughHook(u) {
		ctx = dialhook.With(ctx, proxies.dial)
	} else {
		var hosts []string
		for _, target := range strings.Split(u.Host, ",") {
			p, err := proxies.proxy(target)
			require.NoError(t, err)
			hosts = append(hosts, p.Addr())
		}
		u.Host = strings.Join(hosts, ",")
	}
	l, err := backend.Open(ctx, u.String(), opts...)
	if err != nil {
		proxies.Close()
	}
	require.NoError(t, err)
	h.mu.Lock()
	if h.proxies == nil {
		h.proxies = make(map[*backend.Locker]*proxySet)
	}
	h.proxies[l] = proxies
	h.mu.Unlock()
	t.Cleanup(func() {
		h.mu.Lock()
		delete(h.proxies, l)
		h.mu.Unlock()
		if err := l.Close(); err != nil {
			t.Logf("closing a Locker at the end of the test: %v", err)
		}
		proxies.Close()
	})
	return l
}

// Partition implements Partitioner: it partitions the Locker's proxies
// (connections hang) until heal.
func (h *URLHarness) Partition(t testing.TB, l *backend.Locker) (heal func()) {
	t.Helper()
	proxies := h.proxiesOf(t, l)
	proxies.Partition()
	return proxies.Heal
}

// Crash implements Harness: it cuts the Locker's proxies.
func (h *URLHarness) Crash(t testing.TB, l *backend.Locker) {
	t.Helper()
	h.proxiesOf(t, l).Cut()
}

// proxiesOf returns the proxies of l, failing t if l is not one of the
// Lockers this harness made (or its test has ended).
func (h *URLHarness) proxiesOf(t testing.TB, l *backend.Locker) *proxySet {
	t.Helper()
	h.mu.Lock()
	proxies, ok := h.proxies[l]
	h.mu.Unlock()
	require.True(t, ok, "a Locker this harness did not make")
	return proxies
}

func (h *URLHarness) adminLocker(t testing.TB) *backend.Locker {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.admin == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := backend.Open(ctx, h.rawURL)
		require.NoError(t, err)
		h.admin = l
	}
	return h.admin
}

// Close closes the Locker the harness uses for Revoke and RevokeWaiters.
func (h *URLHarness) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.admin == nil {
		return nil
	}
	return h.admin.Close()
}

// Revoke implements Harness with Locker.Revoke.
func (h *URLHarness) Revoke(t testing.TB, ls *backend.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	found, err := h.adminLocker(t).Revoke(ctx, ls.Name(), ls.Token())
	require.NoError(t, err)
	require.True(t, found, "no acquisition of %q with token %d", ls.Name(), ls.Token())
}

// RevokeWaiters implements WaiterRevoker with Locker.Status and RevokeID.
func (h *URLHarness) RevokeWaiters(t testing.TB, name string) int {
	return RevokeWaitersByID(t, h.adminLocker(t), name)
}

// Capabilities implements Harness.
func (h *URLHarness) Capabilities() Capabilities { return h.caps }
