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
	"unicode"
	"unicode/utf8"

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
	u, s, common, err := checkURL(rawURL)
	if err != nil {
		return nil, err
	}
	if l := loggerOf(opts); l != nil {
		ctx = driver.WithLogger(ctx, l)
	}
	drv, err := s.Open(ctx, u)
	if err != nil {
		return nil, err
	}
	if _, _, err := defaults(drv, drv.Capabilities(), common); err != nil {
		err = fmt.Errorf("%w: %s: %w", ErrInvalidURL, urlkit.Redact(u), err)
		return nil, errors.Join(err, shutdownNow(drv))
	}
	return New(drv, append(common, opts...)...)
}

// CheckURL reports what Open would find wrong with rawURL before it
// connects: the same errors, matching ErrInvalidURL, for the URL's syntax,
// its scheme, the common parameters and, where the adapter has a Check, the
// adapter's own. It dials nothing. A nil error does not promise that Open
// succeeds: the backend may be unreachable, or refuse the credentials.
func CheckURL(rawURL string) error {
	_, _, _, err := checkURL(rawURL)
	return err
}

// checkURL is CheckURL, returning what Open needs next: the parsed URL, its
// scheme and the common parameters' options.
func checkURL(rawURL string) (*url.URL, driver.Scheme, []Option, error) {
	u, err := urlkit.Parse(rawURL)
	if err != nil {
		return nil, driver.Scheme{}, nil, err
	}
	s, ok := driver.Lookup(u.Scheme)
	if !ok {
		return nil, driver.Scheme{}, nil, fmt.Errorf("%w: unknown scheme %q in %s (known: %s; import the adapter package to register its scheme)",
			ErrInvalidURL, u.Scheme, urlkit.Redact(u), strings.Join(Schemes(), ", "))
	}
	q, err := urlkit.Query(u)
	if err != nil {
		return nil, driver.Scheme{}, nil, err
	}
	known := append(slices.Clone(urlkit.CommonParams), s.Params...)
	for k := range q {
		if !slices.Contains(known, k) {
			sort.Strings(known)
			return nil, driver.Scheme{}, nil, fmt.Errorf("%w: unknown query parameter %q for scheme %s (known: %s)",
				ErrInvalidURL, k, u.Scheme, strings.Join(known, ", "))
		}
	}
	common, err := commonOptions(q)
	if err != nil {
		return nil, driver.Scheme{}, nil, err
	}
	if s.Check != nil {
		if err := s.Check(u); err != nil {
			return nil, driver.Scheme{}, nil, err
		}
	}
	return u, s, common, nil
}

func commonOptions(q url.Values) ([]Option, error) {
	var opts []Option
	var s settings
	for _, d := range []struct {
		key string
		opt func(time.Duration) Option
		to  *time.Duration
	}{{"ttl", WithTTL, &s.ttl}, {"max_hold", WithMaxHold, &s.maxHold}, {"drift", WithDriftMargin, &s.drift}} {
		if v, ok, err := urlkit.Duration(q, d.key); err != nil {
			return nil, err
		} else if ok {
			opts = append(opts, d.opt(v))
			*d.to = v
		}
	}
	// The checks of resolve that need no driver, before any dial; the
	// driver's minimum TTL is checked by the adapter's parser or after it.
	switch {
	case q.Has("ttl") && s.ttl <= 0:
		return nil, urlkit.ValueError("ttl", q.Get("ttl"), "the TTL must be positive")
	case q.Has("max_hold") && s.maxHold < 0:
		return nil, urlkit.ValueError("max_hold", q.Get("max_hold"), "must not be negative (0 means no limit)")
	case q.Has("drift") && s.drift < 0:
		return nil, urlkit.ValueError("drift", q.Get("drift"), "must not be negative (0 turns the margin off)")
	case q.Has("drift") && s.drift >= cmp.Or(s.ttl, DefaultTTL):
		return nil, urlkit.ValueError("drift", q.Get("drift"), fmt.Sprintf("the drift margin must be smaller than the TTL (%v)", cmp.Or(s.ttl, DefaultTTL)))
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
		if h == "" {
			return nil, fmt.Errorf("%w: holder is empty (leave it out for the default, hostname:pid)", ErrInvalidURL)
		}
		if !utf8.ValidString(h) || strings.IndexFunc(h, unicode.IsControl) >= 0 {
			return nil, fmt.Errorf("%w: holder %q is not printable UTF-8", ErrInvalidURL, h)
		}
		opts = append(opts, WithHolder(h))
	}
	return opts, nil
}

// loggerOf returns the logger opts give the Locker (WithLogger), or nil.
func loggerOf(opts []Option) *slog.Logger {
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
