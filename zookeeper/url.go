package zookeeper

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// DefaultPort is the client port assumed for a host given without one.
const DefaultPort = "2181"

// urlParams are the query parameters of zk and zks URLs besides the common
// ones of backend.Open (the TLS files cacert, cert and key on zks only); see
// the package documentation.
var urlParams = append([]string{"session_timeout", "dial_timeout"}, urlkit.TLSParams...)

func init() {
	driver.Register("zk", driver.Scheme{Params: urlParams, Open: open, Check: check, Suite: probeSuite})
	driver.Register("zks", driver.Scheme{Params: urlParams, Open: open, Check: check, Suite: probeSuite})
}

// open opens a driver for backend.Open. The session timeout the server
// grants for ttl (or session_timeout) is the Locker's default TTL
// (Capabilities.DefaultTTL).
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	cfg, err := configOf(u)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := dialDriver(ctx, cfg, driver.LoggerFrom(ctx)) // backend.WithLogger's, or nil: dropped
	if err != nil {
		return nil, fmt.Errorf("zookeeper: open %s: %w", urlkit.Redact(u), err)
	}
	return d, nil
}

// check is the zk and zks schemes' Check: configOf, without dialling. The
// Limits' default TTL is the session timeout the URL asks for, which the
// driver's Capabilities report as granted.
func check(u *url.URL) (driver.Limits, error) {
	cfg, err := configOf(u)
	return ttlLimits.Limits(driver.Limits{DefaultTTL: cfg.SessionTimeout, LockDelay: true}), err
}

// configOf returns the Config a URL opens, with its session timeout from
// ttl (or session_timeout), checked before any dial.
func configOf(u *url.URL) (Config, error) {
	cfg, err := parseURL(u)
	if err != nil {
		return Config{}, err
	}
	q, err := urlkit.Query(u)
	if err != nil {
		return Config{}, err
	}
	ttl, hasTTL, err := urlkit.Duration(q, "ttl")
	if err != nil {
		return Config{}, err
	}
	// The TTL is the session timeout asked for: backend checks it against
	// the Limits of check before Open runs.
	switch {
	case q.Has("session_timeout") && hasTTL && ttl != cfg.SessionTimeout:
		return Config{}, fmt.Errorf("%w: %s: ttl=%v and session_timeout=%v differ, but a ZooKeeper lease's TTL is its session timeout",
			backend.ErrInvalidURL, urlkit.Redact(u), ttl, cfg.SessionTimeout)
	case hasTTL:
		cfg.SessionTimeout = ttl
	case !q.Has("session_timeout"):
		cfg.SessionTimeout = backend.DefaultTTL
	}
	return cfg, nil
}

// parseURL turns a zk or zks URL into a Config. Every error matches
// backend.ErrInvalidURL.
func parseURL(u *url.URL) (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s: %s", backend.ErrInvalidURL, urlkit.Redact(u), fmt.Sprintf(format, args...))
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
		ep, err := urlkit.HostPort(h, DefaultPort)
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
	if cfg.User, cfg.Password, err = urlkit.User(u); err != nil {
		return bad("%v", err)
	}
	if cfg.User != "" && cfg.Password == "" {
		return bad("user %q has no password: digest credentials are zk://user:password@host", cfg.User)
	}
	q, err := urlkit.Query(u)
	if err != nil {
		return Config{}, err
	}
	if d, ok, err := urlkit.PositiveDuration(q, "dial_timeout"); err != nil {
		return Config{}, err
	} else if ok {
		cfg.DialTimeout = d
	} else {
		cfg.DialTimeout = DefaultDialTimeout
	}
	cfg.SessionTimeout = DefaultSessionTimeout
	if d, ok, err := urlkit.Duration(q, "session_timeout"); err != nil {
		return Config{}, err
	} else if ok {
		if d < ttlLimits.Min {
			return Config{}, urlkit.ValueError("session_timeout", q.Get("session_timeout"), fmt.Sprintf("under the ZooKeeper adapter's minimum of %v", ttlLimits.Min))
		}
		if err := ttlLimits.Check(d); err != nil {
			return Config{}, urlkit.ValueError("session_timeout", q.Get("session_timeout"), err.Error())
		}
		cfg.SessionTimeout = d
	}
	if cfg.TLS, err = urlkit.TLS(u, "zks"); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
