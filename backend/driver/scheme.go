package driver

import (
	"context"
	"net/url"
	"slices"
	"sort"
	"sync"
	"time"
)

// Scheme is how an adapter package opens its URLs. Adapters register theirs
// in an init function, like database/sql drivers:
//
//	func init() { driver.Register("etcd", driver.Scheme{Params: ..., Open: ...}) }
type Scheme struct {
	// Params lists the query parameters the adapter reads, besides the
	// common ones that backend.Open handles itself (ttl, auto_renew,
	// max_hold, drift, holder, lock_delay). Register and Lookup copy it:
	// the registry shares no slice with the adapter or the caller.
	Params []string
	// Open returns a Driver for u. It runs only after every query parameter
	// of u was found among the common ones or Params. A default the URL
	// sets for the Locker (ZooKeeper's session_timeout) is the Driver's
	// Capabilities.DefaultTTL.
	Open func(ctx context.Context, u *url.URL) (Driver, error)
	// Check, if set, validates u as Open would, without connecting (it may
	// read local files the URL names, such as certificates), so that a bad
	// URL is reported before anything is dialled, and returns the Limits of
	// the Driver that Open would return for u: package backend checks the
	// URL's ttl and drift, and Open's options, against them before Open
	// runs. Check runs after backend's own checks of the common parameters
	// that need no Limits (ttl positive, drift not negative, ...). Without
	// Check, the Limits are zero.
	Check func(u *url.URL) (Limits, error)
	// Suite, if set, returns what the conformance suite needs to know of
	// the backend at u. A profile that does not depend on the server is
	// StaticSuite(p); one that does (ZooKeeper: the session timeouts the
	// server grants) may ask the server, within ctx. It is called with URLs
	// that Open accepted. Without it, the suite runs on the scheme's URLs
	// with every capability given.
	Suite func(ctx context.Context, u *url.URL) (SuiteProfile, error)
}

// Limits is what a Scheme's Check knows, before connecting, of the Driver
// that Open would return for a URL. Package backend checks the Locker's
// defaults against them before Open dials, and against the Driver's
// Capabilities and CheckTTL once it is open (the server may change what
// the URL asked for: a ZooKeeper server grants its own session timeout).
type Limits struct {
	// MinTTL is the Driver's Capabilities().MinTTL (TTLLimits.Limits sets
	// it and CheckTTL).
	MinTTL time.Duration
	// DefaultTTL is the Driver's Capabilities().DefaultTTL as the URL asks
	// for it (ZooKeeper: the session timeout of its ttl or session_timeout),
	// or zero if the Driver declares none.
	DefaultTTL time.Duration
	// CheckTTL, if set, is the Driver's CheckTTL as far as it needs no
	// server: the TTL's shape (etcd: whole seconds).
	CheckTTL func(ttl time.Duration) error
	// LockDelay is the Driver's Capabilities().LockDelay.
	LockDelay bool
}

// SuiteProfile is what an adapter declares, with its Scheme, about the
// backend behind one of its URLs for the conformance suite (package
// conformance turns it into its Capabilities). It describes the backend,
// not a Locker: the suite sets every Locker's TTL itself.
type SuiteProfile struct {
	// FIFO: waiters are granted the lock in the order they started waiting.
	FIFO bool
	// TTL is a short TTL that the backend honours reliably on a loaded
	// machine: the suite gives it to the leases it wants to expire, and
	// most of its time bounds are multiples of it.
	TTL time.Duration
	// MinTTL is the shortest TTL the backend accepts; a shorter one must be
	// rejected with ErrInvalidOption (TTLLimits.Suite: the least a server
	// with default settings takes). Zero if there is none beyond the
	// Locker's own checks.
	MinTTL time.Duration
	// MaxTTL is the longest TTL the backend grants (a ZooKeeper server's
	// maxSessionTimeout), or zero if it has no practical limit.
	MaxTTL time.Duration
	// LockDelay: the backend honours a lock-delay (backend.WithLockDelay);
	// the suite runs its lock-delay cases.
	LockDelay bool
}

// StaticSuite returns a Scheme.Suite function for a backend whose profile
// does not depend on the server: it returns p for every URL.
func StaticSuite(p SuiteProfile) func(context.Context, *url.URL) (SuiteProfile, error) {
	return func(context.Context, *url.URL) (SuiteProfile, error) { return p, nil }
}

var (
	schemesMu sync.RWMutex
	schemes   = map[string]Scheme{}
)

// Register makes a URL scheme available to backend.Open. It panics if the
// scheme is registered twice or s.Open is nil: both are programming errors
// in an adapter's init.
func Register(name string, s Scheme) {
	schemesMu.Lock()
	defer schemesMu.Unlock()
	if s.Open == nil {
		panic("fencelock: Register " + name + " with a nil Open")
	}
	if _, dup := schemes[name]; dup {
		panic("fencelock: Register called twice for scheme " + name)
	}
	s.Params = slices.Clone(s.Params)
	schemes[name] = s
}

// Lookup returns the Scheme registered under name, and whether there is
// one.
func Lookup(name string) (Scheme, bool) {
	schemesMu.RLock()
	defer schemesMu.RUnlock()
	s, ok := schemes[name]
	s.Params = slices.Clone(s.Params)
	return s, ok
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	schemesMu.RLock()
	defer schemesMu.RUnlock()
	names := make([]string, 0, len(schemes))
	for n := range schemes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
