package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
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
		if cfg.TLS != nil && ctx.Err() == nil {
			if herr := tlsCheck(ctx, cfg.Endpoints[0], cfg.TLS); herr != nil {
				err = fmt.Errorf("%w (TLS with %s: %v)", err, strings.TrimPrefix(cfg.Endpoints[0], "https://"), herr)
			}
		}
		return nil, fmt.Errorf("etcd: cannot reach %s within dial_timeout %v: %w", u.Redacted(), cfg.DialTimeout, err)
	}
	return newDriver(client, prefix, true), nil
}

// tlsCheckTimeout bounds tlsCheck.
const tlsCheckTimeout = time.Second

// tlsCheck tells why TLS with an https endpoint fails, if it does: gRPC
// keeps the handshake's error to itself and the client only reports its
// deadline, so a wrong CA or a missing client certificate would look like
// an unreachable server. It handshakes once with tc and reads briefly, as a
// server refuses a client certificate after a TLS 1.3 handshake. A server
// that cannot be reached, answers, or does not within the bound is no TLS
// problem: nil.
func tlsCheck(ctx context.Context, endpoint string, tc *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, tlsCheckTimeout)
	defer cancel()
	hostport := strings.TrimPrefix(endpoint, "https://")
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		return nil
	}
	defer raw.Close()
	tc = tc.Clone()
	if tc.ServerName == "" {
		tc.ServerName, _, _ = net.SplitHostPort(hostport)
	}
	conn := tls.Client(raw, tc)
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	err = conn.HandshakeContext(ctx)
	if err == nil {
		_, err = conn.Read(make([]byte, 1))
	}
	var nerr net.Error
	if err == nil || ctx.Err() != nil || (errors.As(err, &nerr) && nerr.Timeout()) {
		return nil
	}
	// A failed verification, a TLS alert (remote error: tls: ...), or a
	// connection closed during or right after the handshake.
	return err
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
