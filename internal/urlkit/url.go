// Package urlkit holds what fencelock's adapters share to parse their
// URLs: strict parsing that never echoes a password, query parameters,
// host lists and TLS files. Its errors match driver.ErrInvalidURL.
package urlkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// CommonParams are the query parameters every scheme accepts; each sets the
// Locker default of the Option with the same meaning: ttl (WithTTL),
// auto_renew (WithAutoRenew: true/false), max_hold (WithMaxHold), drift
// (WithDriftMargin), holder (WithHolder), lock_delay (WithLockDelay).
var CommonParams = []string{"ttl", "auto_renew", "max_hold", "drift", "holder", "lock_delay"}

// Parse parses a backend URL for backend.Open and the adapters' Schemes.
// Its errors match driver.ErrInvalidURL and never carry the raw URL: url.Parse
// quotes its input (and a misplaced password, "etcd://u:pw/x@h", parses
// as a host with port "pw"), so only a redacted description of what is
// wrong is kept. The URL must have a scheme and an authority
// ("scheme://..."), and no fragment.
func Parse(rawURL string) (*url.URL, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("%w: empty URL", driver.ErrInvalidURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", driver.ErrInvalidURL, parseErrorText(err))
	}
	switch {
	case u.Scheme == "":
		return nil, fmt.Errorf("%w: no scheme: want scheme://host/path, such as etcd://localhost:2379/locks", driver.ErrInvalidURL)
	case u.Opaque != "" || !strings.HasPrefix(rawURL[len(u.Scheme)+1:], "//"):
		// "etcd:u:pw@h" parses as opaque text, "etcd:/u:pw@h" as a path:
		// never echoed.
		return nil, fmt.Errorf("%w: %s: URL without //: want %s://host/path", driver.ErrInvalidURL, u.Scheme, u.Scheme)
	case u.User == nil && misplacedAt(u):
		// "etcd://app:2024/pw@h" parses as host app, port 2024 (the start of
		// the password) and path /pw@h: nothing of it is echoed.
		return nil, fmt.Errorf("%w: %s: an '@' after the host: a password that holds / ? or # must be percent-encoded (an '@' in the path as %%40)", driver.ErrInvalidURL, u.Scheme)
	case u.Fragment != "" || strings.Contains(rawURL, "#"):
		// Not echoed: "etcd://app:1234#pw@h" parses as host app:1234.
		return nil, fmt.Errorf("%w: %s: a URL fragment (#...) is not allowed (a password that holds # must be percent-encoded)", driver.ErrInvalidURL, u.Scheme)
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

// Redact returns u as a string without secrets, for error messages: the
// password of its userinfo is replaced by xxxxx (as url.URL.Redacted does),
// and so are opaque text, a fragment, the value of a query parameter whose
// name says password (sentinel_password, PostgreSQL's password) and, if u
// has no host, a path that holds '@' (a userinfo that did not parse as
// one).
func Redact(u *url.URL) string {
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
	if strings.Contains(c.RawQuery, "password") {
		if q, err := url.ParseQuery(c.RawQuery); err != nil {
			c.RawQuery = "xxxxx"
		} else {
			for k := range q {
				if strings.Contains(k, "password") {
					q[k] = []string{"xxxxx"}
				}
			}
			c.RawQuery = q.Encode()
		}
	}
	return c.String()
}

// Query returns the query parameters of u, strictly: a malformed query
// (a bad %-escape, a ';' separator, a parameter without a name) or a
// parameter given twice ("ttl=1s&ttl=2s") is an error matching
// driver.ErrInvalidURL, where url.URL.Query would drop the first silently and use
// the first value of the second.
func Query(u *url.URL) (url.Values, error) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed query: %s", driver.ErrInvalidURL, strings.TrimPrefix(quoted.ReplaceAllString(err.Error(), ""), "net/url: "))
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" {
			return nil, fmt.Errorf("%w: a query parameter without a name", driver.ErrInvalidURL)
		}
		if n := len(q[k]); n > 1 {
			return nil, fmt.Errorf("%w: query parameter %s given %d times: give it once", driver.ErrInvalidURL, k, n)
		}
	}
	return q, nil
}

// valueError is an error about a parameter's value that is out of range:
// it matches driver.ErrInvalidURL and driver.ErrInvalidOption.
type valueError struct{ msg string }

func (e *valueError) Error() string { return driver.ErrInvalidURL.Error() + ": " + e.msg }
func (e *valueError) Is(target error) bool {
	return target == driver.ErrInvalidURL || target == driver.ErrInvalidOption
}

// ValueError returns an error for a query parameter whose value is out
// of range, for adapters' URL parsers: it reads "fencelock: invalid URL:
// key=value: why" and matches both driver.ErrInvalidURL and driver.ErrInvalidOption.
func ValueError(key, value, why string) error {
	return &valueError{msg: fmt.Sprintf("%s=%q: %s", key, value, why)}
}

// Duration parses query parameter key as a Go duration ("10s", "1m30s"),
// for adapters' own parameters. ok is false if the parameter is absent.
func Duration(q url.Values, key string) (d time.Duration, ok bool, err error) {
	if !q.Has(key) {
		return 0, false, nil
	}
	d, err = time.ParseDuration(q.Get(key))
	if err != nil {
		return 0, false, fmt.Errorf("%w: %s=%q is not a duration such as 10s", driver.ErrInvalidURL, key, q.Get(key))
	}
	return d, true, nil
}

// PositiveDuration is Duration for a parameter that must be
// positive, such as a timeout: zero or less is an error matching
// driver.ErrInvalidURL and driver.ErrInvalidOption.
func PositiveDuration(q url.Values, key string) (d time.Duration, ok bool, err error) {
	d, ok, err = Duration(q, key)
	if err == nil && ok && d <= 0 {
		return 0, false, ValueError(key, q.Get(key), "must be positive")
	}
	return d, ok, err
}

// User returns the user name and password of u's userinfo, for adapters'
// URL parsers; both are empty if u has none. A userinfo with an empty user
// name is an error.
func User(u *url.URL) (user, password string, err error) {
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

// Bound describes the bound of a dial that gives up after timeout, set by
// the URL parameter param, or when ctx ends, whichever comes first, as
// seen now (call it when the dial starts): "dial_timeout 5s", or "1s, the
// context's deadline (before dial_timeout 5s)" when ctx's deadline comes
// first (a command's --connect-timeout, say). An error of a dial that gave
// up names the bound it had with it.
func Bound(ctx context.Context, param string, timeout time.Duration) string {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < timeout {
			return fmt.Sprintf("%v, the context's deadline (before %s %v)", max(left, 0).Round(time.Millisecond), param, timeout)
		}
	}
	return fmt.Sprintf("%s %v", param, timeout)
}
