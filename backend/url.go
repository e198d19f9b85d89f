package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Scheme is how an adapter package opens its URLs. Adapters register theirs
// in an init function, like database/sql drivers:
//
//	func init() { backend.Register("etcd", backend.Scheme{Params: ..., Open: ...}) }
type Scheme struct {
	// Params lists the query parameters the adapter reads, besides the common
	// ones (CommonParams) that Open handles itself.
	Params []string
	// Open returns a Driver for u. It runs only after every query parameter
	// of u was found in CommonParams or Params.
	Open func(ctx context.Context, u *url.URL) (Driver, error)
}

// CommonParams are the query parameters every scheme accepts; each sets the
// Locker default of the Option with the same meaning: ttl (WithTTL),
// auto_renew (WithAutoRenew: true/false), max_hold (WithMaxHold), drift
// (WithDriftMargin), holder (WithHolder).
var CommonParams = []string{"ttl", "auto_renew", "max_hold", "drift", "holder"}

var (
	schemesMu sync.RWMutex
	schemes   = map[string]Scheme{}
)

// Register makes a URL scheme available to Open. It panics if the scheme is
// registered twice or s.Open is nil: both are programming errors in an
// adapter's init.
func Register(name string, s Scheme) {
	schemesMu.Lock()
	defer schemesMu.Unlock()
	if s.Open == nil {
		panic("fencelock: Register " + name + " with a nil Open")
	}
	if _, dup := schemes[name]; dup {
		panic("fencelock: Register called twice for scheme " + name)
	}
	schemes[name] = s
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

// Open returns a Locker for a backend URL such as
// "etcd://h1:2379,h2:2379/prefix?ttl=10s" or "mem://". The scheme must have
// been registered by importing its adapter package (for its side effect, as
// with database/sql drivers). opts are applied after the URL's common
// parameters. An unknown scheme or query parameter is an error matching
// ErrInvalidURL that lists what is known.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Locker, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	schemesMu.RLock()
	s, ok := schemes[u.Scheme]
	schemesMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: unknown scheme %q in %q (known: %s; import the adapter package to register its scheme)",
			ErrInvalidURL, u.Scheme, u.Redacted(), strings.Join(Schemes(), ", "))
	}
	q := u.Query()
	known := append(slices.Clone(CommonParams), s.Params...)
	for k := range q {
		if !slices.Contains(known, k) {
			sort.Strings(known)
			return nil, fmt.Errorf("%w: unknown query parameter %q for scheme %s (known: %s)",
				ErrInvalidURL, k, u.Scheme, strings.Join(known, ", "))
		}
	}
	common, err := commonOptions(q)
	if err != nil {
		return nil, err
	}
	drv, err := s.Open(ctx, u)
	if err != nil {
		return nil, err
	}
	if _, err := defaults(drv, common); err != nil {
		err = fmt.Errorf("%w: %s: %w", ErrInvalidURL, u.Redacted(), err)
		return nil, errors.Join(err, drv.Close())
	}
	l, err := New(drv, append(common, opts...)...)
	if err != nil {
		return nil, errors.Join(err, drv.Close())
	}
	return l, nil
}

func commonOptions(q url.Values) ([]Option, error) {
	var opts []Option
	for _, d := range []struct {
		key string
		opt func(time.Duration) Option
	}{{"ttl", WithTTL}, {"max_hold", WithMaxHold}, {"drift", WithDriftMargin}} {
		if v, ok, err := URLDuration(q, d.key); err != nil {
			return nil, err
		} else if ok {
			opts = append(opts, d.opt(v))
		}
	}
	if q.Has("auto_renew") {
		on, err := strconv.ParseBool(q.Get("auto_renew"))
		if err != nil {
			return nil, fmt.Errorf("%w: auto_renew=%q is not true or false", ErrInvalidURL, q.Get("auto_renew"))
		}
		opts = append(opts, WithAutoRenew(on))
	}
	if q.Has("holder") {
		opts = append(opts, WithHolder(q.Get("holder")))
	}
	return opts, nil
}

// URLDuration parses query parameter key as a Go duration ("10s", "1m30s"),
// for adapters' own parameters. ok is false if the parameter is absent.
func URLDuration(q url.Values, key string) (d time.Duration, ok bool, err error) {
	if !q.Has(key) {
		return 0, false, nil
	}
	d, err = time.ParseDuration(q.Get(key))
	if err != nil {
		return 0, false, fmt.Errorf("%w: %s=%q is not a duration such as 10s", ErrInvalidURL, key, q.Get(key))
	}
	return d, true, nil
}

// URLUser returns the user name and password of u's userinfo, for adapters'
// URL parsers; both are empty if u has none. A userinfo with an empty user
// name is an error.
func URLUser(u *url.URL) (user, password string, err error) {
	if u.User == nil {
		return "", "", nil
	}
	user = u.User.Username()
	password, _ = u.User.Password()
	if user == "" {
		return "", "", errors.New("empty user name")
	}
	return user, password, nil
}

// HostPort checks one host[:port] of a URL's host list (IPv6 addresses in
// brackets) and returns it as host:port, with defaultPort if it has none,
// for adapters' URL parsers.
func HostPort(h, defaultPort string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("empty host in the host list")
	}
	host, port := h, defaultPort
	if strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1 {
		if !strings.HasPrefix(h, "[") || strings.Contains(h, "]:") {
			var err error
			host, port, err = net.SplitHostPort(h)
			if err != nil {
				return "", fmt.Errorf("host %q: %v", h, err)
			}
		} else {
			host = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		}
	} else if strings.Contains(h, ":") {
		return "", fmt.Errorf("host %q: put IPv6 addresses in brackets, e.g. [::1]:%s", h, defaultPort)
	}
	if host == "" {
		return "", fmt.Errorf("host %q: empty host name", h)
	}
	if strings.ContainsAny(host, "/@?# ") {
		return "", fmt.Errorf("host %q: invalid host name", h)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("host %q: port %q is not a number from 1 to 65535", h, port)
	}
	return net.JoinHostPort(host, port), nil
}
