package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
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
	// Check, if set, validates u as Open would, without connecting (it may
	// read local files the URL names, such as certificates). CheckURL and
	// Open call it after the common checks, so a bad URL is reported before
	// anything is dialled, even by callers that dial something else first.
	Check func(u *url.URL) error
	// Suite, if set, returns what the conformance suite needs to know of
	// the backend at u (package conformance: NewURLHarness,
	// URLCapabilities). A profile that does not depend on the server is
	// StaticSuite(p); one that does (ZooKeeper: the session timeouts the
	// server grants) may ask the server, within ctx. It is called with URLs
	// that Open accepted. Without it, the suite runs on the scheme's URLs
	// only with every capability given.
	Suite func(ctx context.Context, u *url.URL) (SuiteProfile, error)
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
// parameters.
//
// Every part of the URL is checked before any connection is attempted: a
// URL that does not parse, an unknown scheme, an unknown, repeated or
// malformed query parameter, or a value out of range (a TTL that is not
// positive, a drift margin not smaller than the TTL, ...) is an error
// matching ErrInvalidURL that names the parameter and says why (and lists
// what is known); a value out of range matches ErrInvalidOption too. No
// error of Open carries the URL's password: a URL is echoed redacted
// (RedactURL), and a URL that does not parse is not echoed at all.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Locker, error) {
	u, s, common, err := checkURL(rawURL)
	if err != nil {
		return nil, err
	}
	drv, err := s.Open(ctx, u)
	if err != nil {
		return nil, err
	}
	if _, err := defaults(drv, common); err != nil {
		err = fmt.Errorf("%w: %s: %w", ErrInvalidURL, RedactURL(u), err)
		return nil, errors.Join(err, drv.Close())
	}
	l, err := New(drv, append(common, opts...)...)
	if err != nil {
		return nil, errors.Join(err, drv.Close())
	}
	return l, nil
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
func checkURL(rawURL string) (*url.URL, Scheme, []Option, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, Scheme{}, nil, err
	}
	s, ok := LookupScheme(u.Scheme)
	if !ok {
		return nil, Scheme{}, nil, fmt.Errorf("%w: unknown scheme %q in %s (known: %s; import the adapter package to register its scheme)",
			ErrInvalidURL, u.Scheme, RedactURL(u), strings.Join(Schemes(), ", "))
	}
	q, err := URLQuery(u)
	if err != nil {
		return nil, Scheme{}, nil, err
	}
	known := append(slices.Clone(CommonParams), s.Params...)
	for k := range q {
		if !slices.Contains(known, k) {
			sort.Strings(known)
			return nil, Scheme{}, nil, fmt.Errorf("%w: unknown query parameter %q for scheme %s (known: %s)",
				ErrInvalidURL, k, u.Scheme, strings.Join(known, ", "))
		}
	}
	common, err := commonOptions(q)
	if err != nil {
		return nil, Scheme{}, nil, err
	}
	if s.Check != nil {
		if err := s.Check(u); err != nil {
			return nil, Scheme{}, nil, err
		}
	}
	return u, s, common, nil
}

// ParseURL parses a backend URL for Open and adapters' own Open functions.
// Its errors match ErrInvalidURL and never carry the raw URL: url.Parse
// quotes its input (and a misplaced password, "etcd://u:pw/x@h", parses
// as a host with port "pw"), so only a redacted description of what is
// wrong is kept. The URL must have a scheme and an authority
// ("scheme://..."), and no fragment.
func ParseURL(rawURL string) (*url.URL, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("%w: empty URL", ErrInvalidURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidURL, parseErrorText(err))
	}
	switch {
	case u.Scheme == "":
		return nil, fmt.Errorf("%w: no scheme: want scheme://host/path, such as etcd://localhost:2379/locks", ErrInvalidURL)
	case u.Opaque != "" || !strings.HasPrefix(rawURL[len(u.Scheme)+1:], "//"):
		// "etcd:u:pw@h" parses as opaque text, "etcd:/u:pw@h" as a path:
		// never echoed.
		return nil, fmt.Errorf("%w: %s: URL without //: want %s://host/path", ErrInvalidURL, u.Scheme, u.Scheme)
	case u.User == nil && misplacedAt(u):
		// "etcd://app:2024/pw@h" parses as host app, port 2024 (the start of
		// the password) and path /pw@h: nothing of it is echoed.
		return nil, fmt.Errorf("%w: %s: an '@' after the host: a password that holds / ? or # must be percent-encoded (an '@' in the path as %%40)", ErrInvalidURL, u.Scheme)
	case u.Fragment != "" || strings.Contains(rawURL, "#"):
		// Not echoed: "etcd://app:1234#pw@h" parses as host app:1234.
		return nil, fmt.Errorf("%w: %s: a URL fragment (#...) is not allowed (a password that holds # must be percent-encoded)", ErrInvalidURL, u.Scheme)
	}
	return u, nil
}

// misplacedAt reports whether a URL without userinfo has an '@' where a
// userinfo whose password held '/', '?' or '#' would leave it: in the path
// (written, not %40), in a query parameter's name, or in the fragment.
func misplacedAt(u *url.URL) bool {
	if strings.Contains(u.EscapedPath(), "@") || strings.Contains(u.Fragment, "@") {
		return true
	}
	for _, kv := range strings.Split(u.RawQuery, "&") {
		if k, _, _ := strings.Cut(kv, "="); strings.Contains(k, "@") {
			return true
		}
	}
	return false
}

// quoted matches the quoted parts of url.Parse's errors, which are pieces
// of the input.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// parseErrorText describes an error of url.Parse without the input it
// quotes: for "etcd://app:secret@host:notaport/locks" it is `invalid port
// after host`, never the URL.
func parseErrorText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := strings.TrimPrefix(quoted.ReplaceAllString(err.Error(), ""), "net/url: ")
	msg = strings.Join(strings.Fields(msg), " ")
	hint := ""
	switch {
	case strings.Contains(msg, "port"):
		hint = " (a port is a number from 1 to 65535; a password holding / ? # @ or : must be percent-encoded)"
	case strings.Contains(msg, "escape"):
		hint = " (write % as %25)"
	case strings.Contains(msg, "missing ']'"):
		hint = " (IPv6 addresses go in brackets: [::1]:2379)"
	}
	return "cannot parse the URL: " + msg + hint
}

// RedactURL returns u as a string without secrets, for error messages: the
// password of its userinfo is replaced by xxxxx (as url.URL.Redacted does),
// and so are opaque text, a fragment and, if u has no host, a path that
// holds '@' (a userinfo that did not parse as one).
func RedactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), "xxxxx")
		}
	}
	if c.Opaque != "" {
		c.Opaque = "xxxxx"
	}
	if c.Fragment != "" || c.RawFragment != "" {
		c.Fragment, c.RawFragment = "xxxxx", ""
	}
	if c.Host == "" && strings.Contains(c.Path, "@") {
		c.Path, c.RawPath = "/xxxxx", ""
	}
	return c.String()
}

// URLQuery returns the query parameters of u, strictly: a malformed query
// (a bad %-escape, a ';' separator, a parameter without a name) or a
// parameter given twice ("ttl=1s&ttl=2s") is an error matching
// ErrInvalidURL, where url.URL.Query would drop the first silently and use
// the first value of the second.
func URLQuery(u *url.URL) (url.Values, error) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed query: %s", ErrInvalidURL, strings.TrimPrefix(quoted.ReplaceAllString(err.Error(), ""), "net/url: "))
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" {
			return nil, fmt.Errorf("%w: a query parameter without a name", ErrInvalidURL)
		}
		if n := len(q[k]); n > 1 {
			return nil, fmt.Errorf("%w: query parameter %s given %d times: give it once", ErrInvalidURL, k, n)
		}
	}
	return q, nil
}

// valueError is an error about a parameter's value that is out of range:
// it matches ErrInvalidURL and ErrInvalidOption.
type valueError struct{ msg string }

func (e *valueError) Error() string { return ErrInvalidURL.Error() + ": " + e.msg }
func (e *valueError) Is(target error) bool {
	return target == ErrInvalidURL || target == ErrInvalidOption
}

// URLValueError returns an error for a query parameter whose value is out
// of range, for adapters' URL parsers: it reads "fencelock: invalid URL:
// key=value: why" and matches both ErrInvalidURL and ErrInvalidOption.
func URLValueError(key, value, why string) error {
	return &valueError{msg: fmt.Sprintf("%s=%q: %s", key, value, why)}
}

func commonOptions(q url.Values) ([]Option, error) {
	var opts []Option
	var s settings
	for _, d := range []struct {
		key string
		opt func(time.Duration) Option
		to  *time.Duration
	}{{"ttl", WithTTL, &s.ttl}, {"max_hold", WithMaxHold, &s.maxHold}, {"drift", WithDriftMargin, &s.drift}} {
		if v, ok, err := URLDuration(q, d.key); err != nil {
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
		return nil, URLValueError("ttl", q.Get("ttl"), "the TTL must be positive")
	case q.Has("max_hold") && s.maxHold < 0:
		return nil, URLValueError("max_hold", q.Get("max_hold"), "must not be negative (0 means no limit)")
	case q.Has("drift") && s.drift < 0:
		return nil, URLValueError("drift", q.Get("drift"), "must not be negative (0 turns the margin off)")
	case q.Has("drift") && s.drift >= cmp.Or(s.ttl, DefaultTTL):
		return nil, URLValueError("drift", q.Get("drift"), fmt.Sprintf("the drift margin must be smaller than the TTL (%v)", cmp.Or(s.ttl, DefaultTTL)))
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

// URLPositiveDuration is URLDuration for a parameter that must be
// positive, such as a timeout: zero or less is an error matching
// ErrInvalidURL and ErrInvalidOption.
func URLPositiveDuration(q url.Values, key string) (d time.Duration, ok bool, err error) {
	d, ok, err = URLDuration(q, key)
	if err == nil && ok && d <= 0 {
		return 0, false, URLValueError(key, q.Get(key), "must be positive")
	}
	return d, ok, err
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
