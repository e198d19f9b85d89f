package redis

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
)

// Params are the query parameters of redis and rediss URLs besides
// backend.CommonParams: the adapter's own (prefix, clock_floor,
// wait_replicas, wait_timeout), the TLS files of backend.TLSParams (cacert,
// cert, key; rediss only) and the go-redis client settings that
// redis.ParseURL reads. See the package documentation.
var Params = slices.Concat([]string{"prefix", "clock_floor", "wait_replicas", "wait_timeout"}, backend.TLSParams, clientParams)

// clientParams are handed to go-redis's ParseURL unchanged.
var clientParams = []string{
	"protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout",
	"min_idle_conns", "max_idle_conns", "max_active_conns", "conn_max_idle_time",
	"conn_max_lifetime", "skip_verify",
}

func init() {
	for _, scheme := range []string{"redis", "rediss"} {
		backend.Register(scheme, backend.Scheme{Params: Params, Open: open})
	}
}

func open(ctx context.Context, u *url.URL) (backend.Driver, error) {
	opt, cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	// A blocked request returns when its context ends, not after the
	// client's read timeout: Acquire's deadline holds while the server
	// cannot be reached.
	opt.ContextTimeoutEnabled = true
	c := goredis.NewClient(opt)
	d, err := newDriver(c, cfg, c)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return d, nil
}

// parseURL splits a redis or rediss URL into go-redis client options and the
// adapter's Config.
func parseURL(u *url.URL) (*goredis.Options, Config, error) {
	bad := func(format string, args ...any) (*goredis.Options, Config, error) {
		return nil, Config{}, fmt.Errorf("%w: %s: %s", backend.ErrInvalidURL, u.Redacted(), fmt.Sprintf(format, args...))
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return bad("scheme must be redis or rediss")
	}
	if u.Host == "" {
		return bad("no host")
	}
	q := u.Query()
	var cfg Config
	if q.Has("prefix") {
		if cfg.Prefix = q.Get("prefix"); cfg.Prefix == "" {
			return bad("prefix is empty")
		}
	}
	if q.Has("clock_floor") {
		on, err := strconv.ParseBool(q.Get("clock_floor"))
		if err != nil {
			return bad("clock_floor=%q is not true or false", q.Get("clock_floor"))
		}
		cfg.ClockFloor = on
	}
	if q.Has("wait_replicas") {
		n, err := strconv.Atoi(q.Get("wait_replicas"))
		if err != nil || n < 0 {
			return bad("wait_replicas=%q is not a number of replicas", q.Get("wait_replicas"))
		}
		cfg.WaitReplicas = n
	}
	if d, ok, err := backend.URLDuration(q, "wait_timeout"); err != nil {
		return nil, Config{}, err
	} else if ok {
		if d <= 0 {
			return bad("wait_timeout must be positive, got %v", d)
		}
		cfg.WaitTimeout = d
	}
	cfg, err := cfg.check()
	if err != nil {
		return bad("%v", err)
	}

	// go-redis parses the rest; it must not see our parameters.
	cu := *u
	cq := url.Values{}
	for k, v := range q {
		if slices.Contains(clientParams, k) {
			cq[k] = v
		}
	}
	cu.RawQuery = cq.Encode()
	opt, err := goredis.ParseURL(cu.String())
	if err != nil {
		return bad("%v", err)
	}
	// go-redis's own TLS settings (ServerName from the host, skip_verify)
	// stay; the files add the roots and the client certificate.
	tc, err := backend.URLTLS(u, "rediss")
	if err != nil {
		return nil, Config{}, err
	}
	if tc != nil && opt.TLSConfig == nil {
		opt.TLSConfig = tc
	} else if tc != nil {
		opt.TLSConfig.MinVersion = max(opt.TLSConfig.MinVersion, tc.MinVersion)
		opt.TLSConfig.RootCAs = tc.RootCAs
		opt.TLSConfig.Certificates = tc.Certificates
	}
	if u.User != nil && u.User.Username() == "" {
		if _, hasPass := u.User.Password(); !hasPass {
			return bad("empty user name")
		}
	}
	return opt, cfg, nil
}
