package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// Schemes returns the URL schemes Open knows, sorted: those of the adapter
// packages imported.
func Schemes() []string { return driver.Schemes() }

// Open returns a Locker for a backend URL such as
// "etcd://h1:2379,h2:2379/prefix?ttl=10s" or "mem://". The scheme must have
// been registered by importing its adapter package (for its side effect, as
// with database/sql drivers). opts are applied after the URL's common
// parameters. The logger of WithLogger also receives the lines of the
// client the adapter opens (go-redis, go-zookeeper, clientv3), at debug
// level with the attribute client=<library>; without it they are dropped,
// never written to os.Stderr.
//
// Every part of the URL is checked before any connection is attempted: a
// URL that does not parse, an unknown scheme, an unknown, repeated or
// malformed query parameter, or a value out of range (a TTL that is not
// positive, a drift margin not smaller than the TTL, ...) is an error
// matching ErrInvalidURL that names the parameter and says why (and lists
// what is known); a value out of range matches ErrInvalidOption too. No
// error of Open carries the URL's password: a URL is echoed redacted
// (its password replaced by xxxxx), and a URL that does not parse is not
// echoed at all.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Locker, error) {
	u, s, common, lim, err := checkURL(rawURL)
	if err != nil {
		return nil, err
	}
	// The Locker's defaults, opts included, against what the scheme knows
	// of the backend before it connects: an option it cannot honour fails
	// here, not after a dial.
	if err := checkDefaults(lim, append(common, opts...)); err != nil {
		return nil, err
	}
	if l := LoggerOf(opts...); l != nil {
		ctx = driver.WithLogger(ctx, l)
	}
	drv, err := s.Open(ctx, u)
	if err != nil {
		return nil, err
	}
	// Again against the driver: the server may have changed what the URL
	// asked for (a ZooKeeper server grants its own session timeout).
	if _, _, err := defaults(drv, drv.Capabilities(), common); err != nil {
		err = fmt.Errorf("%w: %s: %w", ErrInvalidURL, urlkit.Redact(u), err)
		return nil, errors.Join(err, shutdownNow(drv))
	}
	return New(drv, append(common, opts...)...)
}

// CheckURL reports what Open would find wrong with rawURL before it
// connects: the same errors, matching ErrInvalidURL, for the URL's syntax,
// its scheme, the common parameters (ttl and drift checked against the
// backend's minimum TTL, its TTL's shape and its default TTL as the URL
// sets it, as Open checks them) and, where the adapter has a Check, the
// adapter's own. It dials nothing. A nil error does not promise that Open
// succeeds: the backend may be unreachable, refuse the credentials, or
// grant a TTL other than the one asked for (a ZooKeeper session timeout).
func CheckURL(rawURL string) error {
	_, _, _, _, err := checkURL(rawURL)
	return err
}

// checkURL is CheckURL, returning what Open needs next: the parsed URL, its
// scheme, the common parameters' options and the Limits its Check
// reported.
func checkURL(rawURL string) (*url.URL, driver.Scheme, []Option, driver.Limits, error) {
	fail := func(err error) (*url.URL, driver.Scheme, []Option, driver.Limits, error) {
		return nil, driver.Scheme{}, nil, driver.Limits{}, err
	}
	u, err := urlkit.Parse(rawURL)
	if err != nil {
		return fail(err)
	}
	s, ok := driver.Lookup(u.Scheme)
	if !ok {
		return fail(fmt.Errorf("%w: unknown scheme %q in %s (known: %s; import the adapter package to register its scheme)",
			ErrInvalidURL, u.Scheme, urlkit.Redact(u), strings.Join(Schemes(), ", ")))
	}
	q, err := urlkit.Query(u)
	if err != nil {
		return fail(err)
	}
	known := append(slices.Clone(urlkit.CommonParams), s.Params...)
	for k := range q {
		if !slices.Contains(known, k) {
			sort.Strings(known)
			return fail(fmt.Errorf("%w: unknown query parameter %q for scheme %s (known: %s)",
				ErrInvalidURL, k, u.Scheme, strings.Join(known, ", ")))
		}
	}
	common, err := commonOptions(q)
	if err != nil {
		return fail(err)
	}
	var lim driver.Limits
	if s.Check != nil {
		if lim, err = s.Check(u); err != nil {
			return fail(err)
		}
	}
	if err := checkTTLParams(u.Scheme, q, lim); err != nil {
		return fail(err)
	}
	return u, s, common, lim, nil
}

// checkTTLParams checks the URL's ttl and drift against the scheme's
// Limits, as New checks WithTTL and WithDriftMargin against the driver:
// the ttl against the backend's minimum and its CheckTTL, the drift margin
// against the TTL the Locker will have (the URL's ttl, else the default
// TTL the URL sets, else DefaultTTL). commonOptions has checked the rest.
func checkTTLParams(scheme string, q url.Values, lim driver.Limits) error {
	ttl := cmp.Or(lim.DefaultTTL, DefaultTTL)
	if q.Has("ttl") {
		ttl, _ = time.ParseDuration(q.Get("ttl")) // commonOptions parsed it
		if ttl < lim.MinTTL {
			return urlkit.ValueError("ttl", q.Get("ttl"), fmt.Sprintf("under the minimum TTL of %s URLs, %v", scheme, lim.MinTTL))
		}
		if err := limitsChecker(lim.CheckTTL).CheckTTL(ttl); err != nil {
			return urlkit.ValueError("ttl", q.Get("ttl"), err.Error())
		}
	}
	if q.Has("lock_delay") && !lim.LockDelay {
		if d, _ := time.ParseDuration(q.Get("lock_delay")); d > 0 {
			return urlkit.ValueError("lock_delay", q.Get("lock_delay"), fmt.Sprintf("%s URLs cannot enforce a lock-delay", scheme))
		}
	}
	if q.Has("drift") {
		if drift, _ := time.ParseDuration(q.Get("drift")); drift >= ttl {
			return urlkit.ValueError("drift", q.Get("drift"), fmt.Sprintf("the drift margin must be smaller than the TTL (%v)", ttl))
		}
	}
	return nil
}

// checkDefaults checks the Locker's defaults that opts give against lim,
// before any dial, as New checks them against the driver. Its errors match
// ErrInvalidOption.
func checkDefaults(lim driver.Limits, opts []Option) error {
	base := defaultSettings()
	if lim.DefaultTTL > 0 {
		base.ttl = lim.DefaultTTL
	}
	s := apply(base, opts)
	return s.check(lim.MinTTL, limitsChecker(lim.CheckTTL), lim.LockDelay)
}

func commonOptions(q url.Values) ([]Option, error) {
	var opts []Option
	var s settings
	for _, d := range []struct {
		key string
		opt func(time.Duration) Option
		to  *time.Duration
	}{{"ttl", WithTTL, &s.ttl}, {"max_hold", WithMaxHold, &s.maxHold}, {"drift", WithDriftMargin, &s.drift},
		{"lock_delay", WithLockDelay, &s.lockDelay}} {
		if v, ok, err := urlkit.Duration(q, d.key); err != nil {
			return nil, err
		} else if ok {
			opts = append(opts, d.opt(v))
			*d.to = v
		}
	}
	// The checks of resolve that need no driver, before any dial;
	// checkTTLParams checks ttl and drift against the scheme's Limits.
	switch {
	case q.Has("ttl") && s.ttl <= 0:
		return nil, urlkit.ValueError("ttl", q.Get("ttl"), "the TTL must be positive")
	case q.Has("max_hold") && s.maxHold < 0:
		return nil, urlkit.ValueError("max_hold", q.Get("max_hold"), "must not be negative (0 means no limit)")
	case q.Has("drift") && s.drift < 0:
		return nil, urlkit.ValueError("drift", q.Get("drift"), "must not be negative (0 turns the margin off)")
	case q.Has("lock_delay") && s.lockDelay < 0:
		return nil, urlkit.ValueError("lock_delay", q.Get("lock_delay"), "must not be negative (0 turns it off)")
	}
	if q.Has("auto_renew") {
		on, err := strconv.ParseBool(q.Get("auto_renew"))
		if err != nil {
			return nil, fmt.Errorf("%w: auto_renew=%q is not true or false", ErrInvalidURL, q.Get("auto_renew"))
		}
		opts = append(opts, WithAutoRenew(on))
	}
	if q.Has("holder") {
		h := q.Get("holder")
		if why := holderProblem(h); why != "" {
			return nil, urlkit.ValueError("holder", h, why)
		}
		opts = append(opts, WithHolder(h))
	}
	return opts, nil
}

// LoggerOf returns the logger opts give a Locker (WithLogger), or nil: for
// an adapter's constructor that opens a client of its own (zookeeper.Dial),
// whose lines go to that logger as those of the clients Open opens do.
func LoggerOf(opts ...Option) *slog.Logger {
	var s settings
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if s.obs == nil {
		return nil
	}
	return s.obs.logger
}
