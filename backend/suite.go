package backend

import (
	"context"
	"net/url"
	"time"
)

// SuiteProfile is what an adapter declares, with its Scheme, about the
// backend behind one of its URLs for the conformance suite (package
// conformance turns it into its Capabilities), so that the suite can run
// against any registered scheme with nothing but a URL. It describes the
// backend, not a Locker: the suite sets every Locker's TTL itself.
type SuiteProfile struct {
	// FIFO: waiters are granted the lock in the order they started waiting.
	FIFO bool
	// TTL is a short TTL that the backend honours reliably on a loaded
	// machine: the suite gives it to the leases it wants to expire, and
	// most of its time bounds are multiples of it.
	TTL time.Duration
	// MinTTL is the shortest TTL the backend accepts; a shorter one must be
	// rejected with ErrInvalidOption. Zero if there is none beyond the
	// Locker's own checks.
	MinTTL time.Duration
	// MaxTTL is the longest TTL the backend grants (a ZooKeeper server's
	// maxSessionTimeout), or zero if it has no practical limit.
	MaxTTL time.Duration
}

// LookupScheme returns the Scheme registered under name, and whether there
// is one.
func LookupScheme(name string) (Scheme, bool) {
	schemesMu.RLock()
	defer schemesMu.RUnlock()
	s, ok := schemes[name]
	return s, ok
}

// StaticSuite returns a Scheme.Suite function for a backend whose profile
// does not depend on the server: it returns p for every URL.
func StaticSuite(p SuiteProfile) func(context.Context, *url.URL) (SuiteProfile, error) {
	return func(context.Context, *url.URL) (SuiteProfile, error) { return p, nil }
}
