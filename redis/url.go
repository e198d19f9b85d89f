package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/dialhook"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// urlParams are the query parameters of redis and rediss URLs besides the
// common ones of backend.Open: the adapter's own (prefix, clock_floor,
// wait_replicas, wait_timeout, foreign_interval, foreign_gap,
// mixed_fleet), the TLS files (cacert, cert, key; rediss
// only) and the go-redis client settings that
// redis.ParseURL reads. See the package documentation.
var urlParams = slices.Concat([]string{"prefix", "clock_floor", "wait_replicas", "wait_timeout", "foreign_interval", "foreign_gap", "mixed_fleet"},
	urlkit.TLSParams, clientParams)

// clientParams are handed to go-redis's ParseURL unchanged.
var clientParams = []string{
	"protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout",
	"min_idle_conns", "max_idle_conns", "max_active_conns", "conn_max_idle_time",
	"conn_max_lifetime", "skip_verify",
}

func init() {
	for scheme, s := range schemes {
		params := urlParams
		switch s.topo {
		case sentinel:
			params = slices.Concat(urlParams, sentinelParams)
		case cluster:
			params = slices.Concat(urlParams, clusterParams)
		}
		driver.Register(scheme, driver.Scheme{Params: params, Open: open, Check: check, Suite: driver.StaticSuite(suiteProfile)})
	}
}

// DefaultDialTimeout is the client's dial timeout when the URL does not set
// dial_timeout (go-redis's default), and Open's bound on its first PING.
const DefaultDialTimeout = 5 * time.Second

// probeDelay is how long open waits for the server's first answer before
// it also probes it for a TLS mismatch, so that a redis:// URL aimed at a
// TLS port, or a rediss:// URL at a plain one, fails well within
// dial_timeout and says why.
const probeDelay = 250 * time.Millisecond

// check is the schemes' Check: parseEndpoint, without dialling, and
// urlLimits.
func check(u *url.URL) (driver.Limits, error) {
	_, _, err := parseEndpoint(u)
	return urlLimits, err
}

// urlLimits is what backend checks a Redis URL's ttl and drift against
// before any dial: ttlLimits, as the driver's Capabilities and CheckTTL.
var urlLimits = ttlLimits.Limits(driver.Limits{LockDelay: true})

// open opens a client and checks, with one PING bounded by dial_timeout and
// ctx, that the server can be reached and accepts the credentials: an
// unreachable server, a wrong password or a TLS mismatch is an error of
// Open, not of the first acquisition.
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	ep, cfg, err := parseEndpoint(u)
	if err != nil {
		return nil, err
	}
	opt := ep.opt
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// A blocked request returns when its context ends, not after the
	// client's read timeout: Acquire's deadline holds while the server
	// cannot be reached.
	opt.ContextTimeoutEnabled = true
	// What go-redis logs for this client goes to backend.WithLogger's
	// logger, or nowhere (see clientLogger).
	logs := &clientLog{l: driver.LoggerFrom(ctx)}
	dials := &dialLog{}
	opt.Dialer = dials.dialer(opt, logs, dialhook.From(ctx))
	var c ownedClient
	switch ep.topo {
	case sentinel:
		c = goredis.NewFailoverClient(ep.failoverOptions())
	case cluster:
		c = goredis.NewClusterClient(ep.clusterOptions())
	default:
		c = goredis.NewClient(opt)
	}
	c.AddHook(logHook{logs})
	var owned io.Closer = c
	if ep.topo == sentinel {
		owned = closeThen{c, ownedSentinels.add(logs, append([]string{ep.masterName}, ep.addrs...)...)}
	}
	d, err := newDriver(c, cfg, owned)
	if err != nil {
		_ = owned.Close()
		return nil, err
	}
	if err := ping(ctx, c, ep, dials); err != nil {
		_ = d.Shutdown(ctx)
		return nil, fmt.Errorf("redis: %s: %w", urlkit.Redact(u), err)
	}
	return d, nil
}

// closeThen closes its Closer, then calls then.
type closeThen struct {
	io.Closer
	then func()
}

func (c closeThen) Close() error {
	defer c.then()
	return c.Closer.Close()
}

// ownedClient is a client that open makes: a *goredis.Client (also for
// Sentinel) or a *goredis.ClusterClient.
type ownedClient interface {
	Client
	AddHook(goredis.Hook)
	Ping(ctx context.Context) *goredis.StatusCmd
	Close() error
}

// ping sends one PING within the dial timeout and ctx (through a
// Sentinel client, to the primary the Sentinels name; through a cluster
// client, to a node); while it waits, a probe of the URL's first host
// looks for a TLS mismatch. Its error names the bound of the two that was
// the shorter.
func ping(ctx context.Context, c ownedClient, ep endpoint, dials *dialLog) error {
	opt := ep.opt
	bound := urlkit.Bound(ctx, "dial_timeout", opt.DialTimeout)
	dctx, cancel := context.WithTimeout(ctx, opt.DialTimeout)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- c.Ping(dctx).Err() }()
	unreachable := func(err error) error {
		if derr := dials.last(); derr != nil && !strings.Contains(err.Error(), derr.Error()) {
			err = fmt.Errorf("%w (%v)", err, derr)
		}
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		over := "without TLS"
		if opt.TLSConfig != nil {
			over = "over TLS"
		}
		return fmt.Errorf("%w: cannot reach %s %s within %s: %w", backend.ErrUnavailable, ep.where(), over, bound, err)
	}
	// A refusal may come wrapped (go-redis: "failed to initialize
	// connection options: NOPERM ..." when CLIENT SETNAME or SELECT is not
	// allowed).
	refused := func(err error) bool {
		for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
			if goredis.HasErrorPrefix(err, p) || strings.HasPrefix(err.Error(), p) {
				return true
			}
		}
		return false
	}
	result := func(err error, perr error) error {
		switch {
		case err == nil:
			return nil
		case refused(err):
			return fmt.Errorf("%w: %w", backend.ErrPermission, err)
		case perr != nil:
			return unreachable(fmt.Errorf("%w (%v)", err, perr))
		}
		return unreachable(err)
	}
	timer := time.NewTimer(probeDelay)
	defer timer.Stop()
	select {
	case err := <-got:
		if err == nil || refused(err) || dctx.Err() != nil {
			return result(err, nil)
		}
		return result(err, mismatch(dctx, opt.Addr, opt.TLSConfig))
	case <-timer.C:
	}
	probed := make(chan error, 1)
	go func() { probed <- mismatch(dctx, opt.Addr, opt.TLSConfig) }()
	select {
	case err := <-got:
		if err == nil {
			return nil
		}
		return result(err, <-probed)
	case perr := <-probed:
		if perr != nil {
			cancel()
			<-got
			return fmt.Errorf("%w: cannot reach %s within %s: %w", backend.ErrUnavailable, ep.where(), bound, perr)
		}
	}
	return result(<-got, nil)
}

// mismatch probes addr for a TLS mismatch: a rediss URL (tc set) at a port
// that answers plain RESP or fails TLS, or a redis URL at a TLS port. nil
// if it finds nothing wrong.
func mismatch(ctx context.Context, addr string, tc *tls.Config) error {
	if tc == nil {
		if urlkit.SpeaksTLS(ctx, addr) {
			return errors.New(urlkit.PlainToTLSHint(addr, "rediss"))
		}
		return nil
	}
	if plainRESP(ctx, addr) {
		return fmt.Errorf("TLS: the server at %s answers plain RESP, without TLS: use the redis:// scheme, or its TLS port", addr)
	}
	return urlkit.CheckTLS(ctx, addr, tc)
}

// plainRESP reports whether addr answers a plain PING like a Redis server
// (+PONG, or an error such as -NOAUTH), within urlkit.TLSProbeTimeout.
func plainRESP(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, urlkit.TLSProbeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	b := make([]byte, 1)
	n, _ := c.Read(b)
	return n == 1 && (b[0] == '+' || b[0] == '-')
}

// dialLog is the client's dialer (go-redis's, with the TLS handshake's
// error made explicit), keeping its last failure for Open's error and
// registering each failure in ownedDials, so that go-redis's line about it
// goes to the client's clientLog.
type dialLog struct {
	mu  sync.Mutex
	err error
}

func (l *dialLog) last() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *dialLog) dialer(opt *goredis.Options, logs *clientLog, hook dialhook.Func) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialTLS(ctx, opt, network, addr, hook)
		ownedDials.add(err, logs)
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		return c, err
	}
}

// dialTLS dials as go-redis's default dialer does (through hook if not
// nil), and for TLS does the handshake within the dial timeout and ctx,
// for the host name of addr unless the TLS settings name one, with an
// error that says TLS: go-redis's says "i/o timeout" for a plain port that
// waits silently.
func dialTLS(ctx context.Context, opt *goredis.Options, network, addr string, hook dialhook.Func) (net.Conn, error) {
	dial := (&net.Dialer{Timeout: opt.DialTimeout, KeepAlive: 5 * time.Minute}).DialContext
	if hook != nil {
		dial = hook
	}
	raw, err := dial(ctx, network, addr)
	if err != nil || opt.TLSConfig == nil {
		return raw, err
	}
	tc := opt.TLSConfig
	if tc.ServerName == "" && !tc.InsecureSkipVerify {
		tc = tc.Clone()
		tc.ServerName, _, _ = net.SplitHostPort(addr)
	}
	c := tls.Client(raw, tc)
	deadline := time.Now().Add(opt.DialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	if err := c.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		var ne net.Error
		switch {
		case urlkit.NotTLS(err):
			return nil, fmt.Errorf("TLS handshake with %s: %w (the server does not seem to speak TLS there: is it a plain port?)", addr, err)
		case errors.As(err, &ne) && ne.Timeout():
			return nil, fmt.Errorf("TLS handshake with %s: no answer: %w (a plain Redis port waits silently for a TLS hello: is it one?)", addr, err)
		}
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// intParams and durationParams are the go-redis client settings with a
// number or a duration value, with the least each accepts (go-redis takes
// zero or less to mean "default" or "off": a URL must leave the parameter
// out for the default, and cannot turn a timeout off). boolParams are
// true/false/1/0.
var (
	intParams = map[string]int{
		"protocol": 2, "max_retries": -1, "pool_size": 1, "min_idle_conns": 0,
		"max_idle_conns": 0, "max_active_conns": 0,
	}
	durationParams = []string{
		"min_retry_backoff", "max_retry_backoff", "dial_timeout", "read_timeout",
		"write_timeout", "pool_timeout", "conn_max_idle_time", "conn_max_lifetime",
	}
	boolParams = []string{"pool_fifo", "skip_verify"}
)

// checkClientParams checks the go-redis settings of q, which go-redis's
// ParseURL takes with a lenient reading (a negative timeout turns it off).
func checkClientParams(u *url.URL, q url.Values) error {
	for _, k := range clientParams {
		if !q.Has(k) {
			continue
		}
		v := q.Get(k)
		if least, ok := intParams[k]; ok {
			n, err := strconv.Atoi(v)
			switch {
			case err != nil:
				return fmt.Errorf("%w: %s=%q is not an integer", backend.ErrInvalidURL, k, v)
			case k == "protocol" && n != 2 && n != 3:
				return urlkit.ValueError(k, v, "the RESP protocol version is 2 or 3")
			case n < least:
				return urlkit.ValueError(k, v, fmt.Sprintf("must be at least %d", least))
			}
		}
		if slices.Contains(durationParams, k) {
			d, err := clientDuration(v)
			switch {
			case err != nil:
				return fmt.Errorf("%w: %s=%q is not a duration such as 5s", backend.ErrInvalidURL, k, v)
			case d <= 0:
				return urlkit.ValueError(k, v, "must be positive (leave it out for the default; a lock client cannot turn it off)")
			}
		}
		if slices.Contains(boolParams, k) && v != "true" && v != "false" && v != "1" && v != "0" {
			return fmt.Errorf("%w: %s=%q is not true or false", backend.ErrInvalidURL, k, v)
		}
		if k == "client_name" && (v == "" || strings.IndexFunc(v, func(r rune) bool { return r < '!' || r > '~' }) >= 0) {
			// Redis refuses any other name in CLIENT SETNAME, which
			// go-redis sends on every new connection.
			return urlkit.ValueError(k, v, "a client name is not empty and has only printable ASCII characters, no spaces (Redis refuses others)")
		}
		if k == "skip_verify" && u.Scheme != "rediss" {
			return fmt.Errorf("%w: skip_verify is a TLS setting: use the rediss:// scheme for TLS", backend.ErrInvalidURL)
		}
	}
	if q.Has("min_retry_backoff") && q.Has("max_retry_backoff") {
		lo, _ := clientDuration(q.Get("min_retry_backoff")) // both checked above
		hi, _ := clientDuration(q.Get("max_retry_backoff"))
		if lo > hi {
			return urlkit.ValueError("min_retry_backoff", q.Get("min_retry_backoff"), "larger than max_retry_backoff")
		}
	}
	return nil
}

// clientDuration reads a go-redis duration setting as go-redis's ParseURL
// does: a whole number of seconds ("5"), or a Go duration ("5s").
func clientDuration(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if time.Duration(n) > math.MaxInt64/time.Second || time.Duration(n) < math.MinInt64/time.Second {
			return 0, fmt.Errorf("%s seconds is out of range", v)
		}
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(v)
}

// ParseURL returns the go-redis client options and the adapter's Config
// that a redis:// or rediss:// URL stands for, checked as backend.Open
// checks it and without dialling (TLS files are read), for a client of
// your own built with the URL's settings:
// New(goredis.NewClient(opt), cfg). The common parameters (ttl,
// auto_renew, max_hold, drift, holder) are checked, not returned: they are
// backend.Options. Every error matches backend.ErrInvalidURL.
func ParseURL(rawURL string) (*goredis.Options, Config, error) {
	u, err := checkedURL(rawURL)
	if err != nil {
		return nil, Config{}, err
	}
	return parseURL(u)
}

// parseURL splits a redis or rediss URL into go-redis client options and the
// adapter's Config. Every error matches backend.ErrInvalidURL and none
// holds the password.
func parseURL(u *url.URL) (*goredis.Options, Config, error) {
	if err := checkServerURL(u); err != nil {
		return nil, Config{}, err
	}
	q, err := urlkit.Query(u)
	if err != nil {
		return nil, Config{}, err
	}
	cfg, err := queryConfig(u, q)
	if err != nil {
		return nil, Config{}, err
	}
	if err := checkClientParams(u, q); err != nil {
		return nil, Config{}, err
	}
	opt, err := clientOptions(u, q)
	if err != nil {
		return nil, Config{}, err
	}
	return opt, cfg, nil
}

// invalidURL is an error about u that matches backend.ErrInvalidURL, with
// u's password left out and the message format, args after it.
func invalidURL(u *url.URL, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", backend.ErrInvalidURL, urlkit.Redact(u), fmt.Sprintf(format, args...))
}

// checkServerURL checks the parts of a redis or rediss URL before its
// query: the scheme, one host and its port, the user and the database
// number in the path.
func checkServerURL(u *url.URL) error {
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return invalidURL(u, "scheme must be redis or rediss")
	}
	if u.Opaque != "" {
		return invalidURL(u, "want redis://host:port/db")
	}
	if u.Fragment != "" {
		return invalidURL(u, "unexpected fragment")
	}
	if u.Host == "" {
		return invalidURL(u, "no host: want redis://host:port/db")
	}
	if strings.Contains(u.Host, ",") {
		return invalidURL(u, "one host only: %s:// reaches one server (for Sentinel use %s+sentinel://, for a Redis Cluster %s+cluster://)", u.Scheme, u.Scheme, u.Scheme)
	}
	if _, err := urlkit.HostPort(u.Host, "6379"); err != nil {
		return invalidURL(u, "%v", err)
	}
	if u.User != nil && u.User.Username() == "" {
		if _, hasPass := u.User.Password(); !hasPass {
			return invalidURL(u, "empty user name")
		}
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		// SELECT takes a non-negative int32 at most (the server's
		// databases setting is an int).
		if _, err := strconv.ParseUint(db, 10, 31); err != nil {
			return invalidURL(u, "path %q is not a database number such as /0 (0 to %d)", u.Path, math.MaxInt32)
		}
	}
	return nil
}

// queryConfig reads the adapter's Config from the query q of u: prefix and
// clock_floor, the replication wait (waitConfig) and the mixed-fleet
// settings (foreignConfig), then checks it (Config.check).
func queryConfig(u *url.URL, q url.Values) (Config, error) {
	var cfg Config
	if q.Has("prefix") {
		if cfg.Prefix = q.Get("prefix"); cfg.Prefix == "" {
			return Config{}, invalidURL(u, "prefix is empty")
		}
	}
	if q.Has("clock_floor") {
		on, err := strconv.ParseBool(q.Get("clock_floor"))
		if err != nil {
			return Config{}, fmt.Errorf("%w: clock_floor=%q is not true or false", backend.ErrInvalidURL, q.Get("clock_floor"))
		}
		cfg.NoClockFloor = !on
	}
	if err := waitConfig(q, &cfg); err != nil {
		return Config{}, err
	}
	if err := foreignConfig(q, &cfg); err != nil {
		return Config{}, err
	}
	cfg, err := cfg.check()
	if err != nil {
		return Config{}, invalidURL(u, "%v", err)
	}
	return cfg, nil
}

// waitConfig sets cfg's WaitReplicas and WaitTimeout from q's
// wait_replicas and wait_timeout.
func waitConfig(q url.Values, cfg *Config) error {
	if q.Has("wait_replicas") {
		n, err := strconv.Atoi(q.Get("wait_replicas"))
		if err != nil {
			return fmt.Errorf("%w: wait_replicas=%q is not a number of replicas", backend.ErrInvalidURL, q.Get("wait_replicas"))
		}
		if n < 0 {
			return urlkit.ValueError("wait_replicas", q.Get("wait_replicas"), "must not be negative")
		}
		cfg.WaitReplicas = n
	}
	if d, ok, err := urlkit.Duration(q, "wait_timeout"); err != nil {
		return err
	} else if ok {
		if d < time.Millisecond {
			return urlkit.ValueError("wait_timeout", q.Get("wait_timeout"), "must be at least 1ms (WAIT 0 blocks forever)")
		}
		cfg.WaitTimeout = d
	}
	if q.Has("wait_timeout") && cfg.WaitReplicas == 0 {
		return fmt.Errorf("%w: wait_timeout without wait_replicas: it bounds the wait for replicas", backend.ErrInvalidURL)
	}
	return nil
}

// foreignConfig sets cfg's ForeignInterval, ForeignGap and MixedFleet from
// q's foreign_interval, foreign_gap and mixed_fleet.
func foreignConfig(q url.Values, cfg *Config) error {
	if q.Get("foreign_interval") == "off" {
		cfg.ForeignInterval = -1
	} else if d, ok, err := urlkit.Duration(q, "foreign_interval"); err != nil {
		return err
	} else if ok {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return urlkit.ValueError("foreign_interval", q.Get("foreign_interval"), "must be whole milliseconds, at least 1ms, or off")
		}
		cfg.ForeignInterval = d
	}
	if d, ok, err := urlkit.Duration(q, "foreign_gap"); err != nil {
		return err
	} else if ok {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return urlkit.ValueError("foreign_gap", q.Get("foreign_gap"), "must be whole milliseconds, at least 1ms")
		}
		cfg.ForeignGap = d
	}
	if q.Has("mixed_fleet") {
		on, err := strconv.ParseBool(q.Get("mixed_fleet"))
		if err != nil {
			return fmt.Errorf("%w: mixed_fleet=%q is not true or false", backend.ErrInvalidURL, q.Get("mixed_fleet"))
		}
		cfg.MixedFleet = on
	}
	return nil
}

// clientOptions are the go-redis options of u, whose query q has been
// checked: go-redis parses u with the client parameters of q only, the
// dial timeout defaults to DefaultDialTimeout, and the URL's TLS files
// are added (addTLSFiles).
func clientOptions(u *url.URL, q url.Values) (*goredis.Options, error) {
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
		// Its errors may quote the URL: never passed on.
		msg := err.Error()
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
			msg = strings.ReplaceAll(msg, url.QueryEscape(p), "xxxxx")
			msg = strings.ReplaceAll(msg, url.PathEscape(p), "xxxxx")
		}
		return nil, invalidURL(u, "%s", msg)
	}
	if opt.DialTimeout == 0 {
		opt.DialTimeout = DefaultDialTimeout
	}
	if err := addTLSFiles(u, opt); err != nil {
		return nil, err
	}
	return opt, nil
}

// addTLSFiles adds what the TLS files of a rediss URL (urlkit.TLS) give
// to opt's TLS settings.
func addTLSFiles(u *url.URL, opt *goredis.Options) error {
	// go-redis's own TLS settings (ServerName from the host, skip_verify)
	// stay; the files add the roots and the client certificate.
	tc, err := urlkit.TLS(u, "rediss")
	if err != nil {
		return err
	}
	if tc != nil && opt.TLSConfig == nil {
		opt.TLSConfig = tc
	} else if tc != nil {
		opt.TLSConfig.MinVersion = max(opt.TLSConfig.MinVersion, tc.MinVersion)
		opt.TLSConfig.RootCAs = tc.RootCAs
		opt.TLSConfig.Certificates = tc.Certificates
	}
	return nil
}
