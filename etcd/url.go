package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/backend"
)

// DefaultPort is the client port assumed for a host given without one.
const DefaultPort = "2379"

// DefaultDialTimeout is the client's dial timeout when the URL does not set
// dial_timeout.
const DefaultDialTimeout = 5 * time.Second

// Params are the query parameters of etcd and etcds URLs besides
// backend.CommonParams; see the package documentation.
var Params = append([]string{"dial_timeout"}, backend.TLSParams...)

func init() {
	backend.Register("etcd", backend.Scheme{Params: Params, Open: open})
	backend.Register("etcds", backend.Scheme{Params: Params, Open: open})
}

// open opens a driver that owns its client, for backend.Open.
func open(ctx context.Context, u *url.URL) (backend.Driver, error) {
	cfg, prefix, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: new client for %s: %w", u.Redacted(), err)
	}
	// clientv3 dials lazily: one cheap read, bounded by the dial timeout,
	// makes an unreachable cluster an error of Open rather than a wait that
	// looks like a held lock.
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := client.Get(pctx, prefix, clientv3.WithSerializable(), clientv3.WithCountOnly()); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("etcd: cannot reach %s within dial_timeout %v: %w", u.Redacted(), cfg.DialTimeout, err)
	}
	return newDriver(client, prefix, true), nil
}

// parseURL turns an etcd or etcds URL into a client configuration and a key
// prefix. Every error matches backend.ErrInvalidURL.
func parseURL(u *url.URL) (clientv3.Config, string, error) {
	bad := func(format string, args ...any) (clientv3.Config, string, error) {
		return clientv3.Config{}, "", fmt.Errorf("%w: %s: %s", backend.ErrInvalidURL, u.Redacted(), fmt.Sprintf(format, args...))
	}
	secure := false
	switch u.Scheme {
	case "etcd":
	case "etcds":
		secure = true
	default:
		return bad("scheme %q is neither etcd nor etcds", u.Scheme)
	}
	if u.Opaque != "" {
		return bad("want etcd://host:port,host:port/prefix")
	}
	if u.Fragment != "" {
		return bad("unexpected fragment %q", u.Fragment)
	}

	httpScheme := "http"
	if secure {
		httpScheme = "https"
	}
	var endpoints []string
	if u.Host == "" {
		return bad("no host: want etcd://host:port,host:port/prefix")
	}
	for _, h := range strings.Split(u.Host, ",") {
		ep, err := backend.HostPort(h, DefaultPort)
		if err != nil {
			return bad("%v", err)
		}
		endpoints = append(endpoints, httpScheme+"://"+ep)
	}

	q := u.Query()
	// clientv3 logs every retried call at warn level, cancelled waits
	// included; errors reach the caller anyway.
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: DefaultDialTimeout, Logger: zap.NewNop()}
	if d, ok, err := backend.URLDuration(q, "dial_timeout"); err != nil {
		return clientv3.Config{}, "", fmt.Errorf("%w (in %s)", err, u.Redacted())
	} else if ok {
		if d <= 0 {
			return bad("dial_timeout must be positive, got %v", d)
		}
		cfg.DialTimeout = d
	}
	var err error
	if cfg.Username, cfg.Password, err = backend.URLUser(u); err != nil {
		return bad("%v", err)
	}

	if cfg.TLS, err = backend.URLTLS(u, "etcds"); err != nil {
		return clientv3.Config{}, "", err
	}

	prefix := strings.TrimPrefix(u.Path, "/")
	prefix = strings.TrimRight(prefix, "/")
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return cfg, prefix, nil
}
