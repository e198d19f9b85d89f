package zookeeper

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/fencelock/fencelock/backend"
)

// DefaultPort is the client port assumed for a host given without one.
const DefaultPort = "2181"

// Params are the query parameters of zk and zks URLs besides
// backend.CommonParams (the TLS files of backend.TLSParams on zks only); see
// the package documentation.
var Params = append([]string{"session_timeout", "dial_timeout"}, backend.TLSParams...)

func init() {
	backend.Register("zk", backend.Scheme{Params: Params, Open: open, Check: check, Suite: probeSuite})
	backend.Register("zks", backend.Scheme{Params: Params, Open: open, Check: check, Suite: probeSuite})
}

// open opens a driver for backend.Open. backend.Open takes a Locker's
// default TTL from the ttl parameter only, so session_timeout must agree
// with it there; Open (this package's) has no such limit.
func open(ctx context.Context, u *url.URL) (backend.Driver, error) {
	cfg, err := configOf(u)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := dialDriver(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: open %s: %w", backend.RedactURL(u), err)
	}
	return d, nil
}

// check is the zk and zks schemes' Check: configOf, without dialling.
func check(u *url.URL) error {
	_, err := configOf(u)
	return err
}

// configOf returns the Config a URL opens, with its session timeout from
// ttl (or session_timeout), checked before any dial.
func configOf(u *url.URL) (Config, error) {
	cfg, err := parseURL(u)
	if err != nil {
		return Config{}, err
	}
	q, err := backend.URLQuery(u)
	if err != nil {
		return Config{}, err
	}
	ttl, hasTTL, err := backend.URLDuration(q, "ttl")
	if err != nil {
		return Config{}, err
	}
	// The TTL is the session timeout asked for: checked before any dial.
	switch {
	case hasTTL && ttl <= 0:
		return Config{}, backend.URLValueError("ttl", q.Get("ttl"), "the TTL must be positive")
	case hasTTL && ttl < MinTTL:
		return Config{}, backend.URLValueError("ttl", q.Get("ttl"), fmt.Sprintf("under the ZooKeeper adapter's minimum of %v", MinTTL))
	case hasTTL && checkTTLShape(ttl) != nil:
		return Config{}, backend.URLValueError("ttl", q.Get("ttl"), "ZooKeeper session timeouts are whole milliseconds")
	}
	switch {
	case q.Has("session_timeout") && !hasTTL && cfg.SessionTimeout != backend.DefaultTTL:
		return Config{}, fmt.Errorf("%w: %s: a ZooKeeper lease's TTL is its session timeout, and backend.Open takes the default TTL from ttl: write ttl=%v instead of session_timeout=%v (or open with zookeeper.Open, which applies session_timeout)",
			backend.ErrInvalidURL, backend.RedactURL(u), cfg.SessionTimeout, cfg.SessionTimeout)
	case q.Has("session_timeout") && hasTTL && ttl != cfg.SessionTimeout:
		return Config{}, fmt.Errorf("%w: %s: ttl=%v and session_timeout=%v differ, but a ZooKeeper lease's TTL is its session timeout",
			backend.ErrInvalidURL, backend.RedactURL(u), ttl, cfg.SessionTimeout)
	case hasTTL:
		cfg.SessionTimeout = ttl
	case !q.Has("session_timeout"):
		cfg.SessionTimeout = backend.DefaultTTL
	}
	return cfg, nil
}

// Open opens a Locker from a zk or zks URL like backend.Open, except that a
// session_timeout parameter without ttl becomes the Locker's default TTL
// (the negotiated timeout), as with Dial.
func Open(ctx context.Context, rawURL string, opts ...backend.Option) (*backend.Locker, error) {
	u, err := backend.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "zk" && u.Scheme != "zks" {
		return nil, fmt.Errorf("%w: %s: scheme %q is neither zk nor zks", backend.ErrInvalidURL, backend.RedactURL(u), u.Scheme)
	}
	q, err := backend.URLQuery(u)
	if err != nil {
		return nil, err
	}
	if q.Has("session_timeout") && !q.Has("ttl") {
		cfg, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		q.Set("ttl", cfg.SessionTimeout.String())
		u.RawQuery = q.Encode()
	}
	return backend.Open(ctx, u.String(), opts...)
}

// parseURL turns a zk or zks URL into a Config. Every error matches
// backend.ErrInvalidURL.
func parseURL(u *url.URL) (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s: %s", backend.ErrInvalidURL, backend.RedactURL(u), fmt.Sprintf(format, args...))
	}
	if u.Scheme != "zk" && u.Scheme != "zks" {
		return bad("scheme %q is neither zk nor zks", u.Scheme)
	}
	if u.Opaque != "" {
		return bad("want zk://host:port,host:port/prefix")
	}
	if u.Fragment != "" {
		return bad("unexpected fragment %q", u.Fragment)
	}
	if u.Host == "" {
		return bad("no host: want zk://host:port,host:port/prefix")
	}
	var cfg Config
	for _, h := range strings.Split(u.Host, ",") {
		ep, err := backend.HostPort(h, DefaultPort)
		if err != nil {
			return bad("%v", err)
		}
		cfg.Servers = append(cfg.Servers, ep)
	}
	prefix, err := cleanPrefix(u.Path)
	if err != nil {
		return bad("%v", err)
	}
	if u.Path == "" || u.Path == "/" {
		prefix = DefaultPrefix
	}
	cfg.Prefix = prefix
	if cfg.User, cfg.Password, err = backend.URLUser(u); err != nil {
		return bad("%v", err)
	}
	if cfg.User != "" && cfg.Password == "" {
		return bad("user %q has no password: digest credentials are zk://user:password@host", cfg.User)
	}
	q, err := backend.URLQuery(u)
	if err != nil {
		return Config{}, err
	}
	if d, ok, err := backend.URLPositiveDuration(q, "dial_timeout"); err != nil {
		return Config{}, err
	} else if ok {
		cfg.DialTimeout = d
	} else {
		cfg.DialTimeout = DefaultDialTimeout
	}
	cfg.SessionTimeout = DefaultSessionTimeout
	if d, ok, err := backend.URLDuration(q, "session_timeout"); err != nil {
		return Config{}, err
	} else if ok {
		if d < MinTTL {
			return Config{}, backend.URLValueError("session_timeout", q.Get("session_timeout"), fmt.Sprintf("under the ZooKeeper adapter's minimum of %v", MinTTL))
		}
		if err := checkTTLShape(d); err != nil {
			return Config{}, backend.URLValueError("session_timeout", q.Get("session_timeout"), "ZooKeeper session timeouts are whole milliseconds")
		}
		cfg.SessionTimeout = d
	}
	if cfg.TLS, err = backend.URLTLS(u, "zks"); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
