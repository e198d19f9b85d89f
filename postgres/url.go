package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// urlParams are the query parameters of postgres and postgresql URLs besides
// the common ones of backend.Open: the adapter's own (prefix, migrate,
// listen, listen_host) and the pgx settings handed to pgxpool.ParseConfig
// (TLS through sslmode, sslrootcert, sslcert and sslkey; pool sizes;
// runtime settings such as application_name and search_path). See the
// package documentation.
var urlParams = slices.Concat([]string{"prefix", "migrate", "listen", "listen_host"}, pgxParams)

// pgxParams are handed to pgxpool.ParseConfig unchanged.
var pgxParams = []string{
	"host", "sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "sslsni", "sslnegotiation",
	"connect_timeout", "target_session_attrs", "channel_binding", "application_name", "search_path", "options",
	"pool_max_conns", "pool_min_conns", "pool_min_idle_conns", "pool_max_conn_lifetime", "pool_max_conn_idle_time",
	"pool_health_check_period", "pool_max_conn_lifetime_jitter",
}

func init() {
	for _, scheme := range []string{"postgres", "postgresql"} {
		driver.Register(scheme, driver.Scheme{Params: urlParams, Open: open, Check: check, Suite: driver.StaticSuite(suiteProfile)})
	}
}

// DefaultConnectTimeout bounds each connection's dial and start-up when the
// URL does not set connect_timeout (pgx has no bound of its own): a server
// that accepts and never answers fails Open, and later requests, in time.
const DefaultConnectTimeout = 5 * time.Second

// maxConnectTimeout is the longest connect_timeout a URL may set: a day,
// far more than any dial needs, and far from overflowing a Duration.
const maxConnectTimeout = 24 * time.Hour

// check is the postgres and postgresql schemes' Check: parseURL, without
// dialling (pgx's parser reads the TLS files the URL names), and urlLimits.
func check(u *url.URL) (driver.Limits, error) {
	_, _, err := parseURL(u)
	return urlLimits, err
}

// urlLimits is what backend checks a PostgreSQL URL's ttl and drift against
// before any dial: ttlLimits, as the driver's Capabilities and CheckTTL.
var urlLimits = ttlLimits.Limits(driver.Limits{LockDelay: true})

// parseURL returns the pool configuration and Config of u. The common and
// the adapter's own parameters are taken out of the URL before pgx parses
// it: pgx would send them to the server as runtime settings, which it
// refuses.
func parseURL(u *url.URL) (*pgxpool.Config, Config, error) {
	var cfg Config
	q, err := urlkit.Query(u)
	if err != nil {
		return nil, cfg, err
	}
	fail := func(err error) (*pgxpool.Config, Config, error) {
		return nil, cfg, fmt.Errorf("%w: %s: %w", backend.ErrInvalidURL, urlkit.Redact(u), err)
	}
	if q.Has("prefix") {
		cfg.Prefix = q.Get("prefix")
		if cfg.Prefix == "" {
			return fail(fmt.Errorf("prefix is empty (leave it out for the default, %s)", DefaultPrefix))
		}
		if err := checkPrefix(cfg.Prefix); err != nil {
			return nil, cfg, urlkit.ValueError("prefix", cfg.Prefix, fmt.Sprintf("not a lower-case SQL identifier ([a-z_][a-z0-9_]*) of at most %d bytes", maxPrefix))
		}
	}
	for _, b := range []struct {
		key string
		off *bool
	}{{"migrate", &cfg.NoMigrate}, {"listen", &cfg.NoListen}} {
		if !q.Has(b.key) {
			continue
		}
		on, err := strconv.ParseBool(q.Get(b.key))
		if err != nil {
			return fail(fmt.Errorf("%s=%q is not true or false", b.key, q.Get(b.key)))
		}
		*b.off = !on
	}
	if q.Has("connect_timeout") {
		// pgx, as libpq, takes whole seconds, and 0 for no timeout at all:
		// a dial without a bound, which a lock client cannot have (calls
		// return soon after their context ends, and Open within its bound).
		v := q.Get("connect_timeout")
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil && !errors.Is(err, strconv.ErrRange):
			return fail(fmt.Errorf("connect_timeout=%q is not a whole number of seconds such as 5", v))
		case err != nil || n > int64(maxConnectTimeout/time.Second):
			return nil, cfg, urlkit.ValueError("connect_timeout", v, fmt.Sprintf("more than %v", maxConnectTimeout))
		case n <= 0:
			return nil, cfg, urlkit.ValueError("connect_timeout", v, fmt.Sprintf("must be positive: 0 means no timeout to pgx and libpq, a dial without a bound (leave it out for the default, %v)", DefaultConnectTimeout))
		}
	}
	var listenHost, listenPort string
	if q.Has("listen_host") {
		if cfg.NoListen {
			return fail(fmt.Errorf("listen_host with listen=false"))
		}
		hp, err := urlkit.HostPort(q.Get("listen_host"), "5432")
		if err != nil {
			return fail(fmt.Errorf("listen_host: %w", err))
		}
		listenHost, listenPort, _ = net.SplitHostPort(hp)
	}

	// What pgx gets: the URL without the parameters it must not see.
	stripped := *u
	pq := url.Values{}
	for k, v := range q {
		if slices.Contains(pgxParams, k) {
			pq[k] = v
		}
	}
	stripped.RawQuery = pq.Encode()
	pc, err := pgxpool.ParseConfig(stripped.String())
	if err != nil {
		return fail(pgxError(u, err))
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	// Each statement names its mode anyway; this is for the listener's.
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	if listenHost != "" {
		// The URL again, with the listener's host: pgx derives the TLS
		// settings (sslmode=prefer's plain-text fallback, verify-full's
		// server name) from the host it parses.
		lu := stripped
		lu.Host = net.JoinHostPort(listenHost, listenPort)
		lq := maps.Clone(pq)
		delete(lq, "host")
		lu.RawQuery = lq.Encode()
		lc, err := pgx.ParseConfig(lu.String())
		if err != nil {
			return fail(fmt.Errorf("listen_host: %w", pgxError(u, err)))
		}
		if lc.ConnectTimeout == 0 {
			lc.ConnectTimeout = DefaultConnectTimeout
		}
		lc.DefaultQueryExecMode = pgx.QueryExecModeExec
		cfg.Listen = lc
	}
	return pc, cfg, nil
}

// pgxQuoted is the URL pgx quotes at the start of its parse errors
// (redacted, but the adapter's own redaction is already in the error).
var pgxQuoted = regexp.MustCompile("^cannot parse `[^`]*`: ")

// pgxError returns the reason of pgx's parse error, without the URL or any
// form of its password.
func pgxError(u *url.URL, err error) error {
	msg := pgxQuoted.ReplaceAllString(err.Error(), "")
	if pw, ok := u.User.Password(); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
		msg = strings.ReplaceAll(msg, url.QueryEscape(pw), "xxxxx")
		msg = strings.ReplaceAll(msg, url.PathEscape(pw), "xxxxx")
	}
	return fmt.Errorf("pgx: %s", msg)
}

// open opens a pool and checks, with one ping bounded by ctx and
// connect_timeout, that the server can be reached and accepts the
// credentials, then migrates the schema unless migrate=false: an
// unreachable server, a wrong password or a user who may not create the
// tables is an error of Open, not of the first acquisition.
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	pc, cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	bound := urlkit.Bound(ctx, "connect_timeout", pc.ConnConfig.ConnectTimeout)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", urlkit.Redact(u), mapErr(err))
	}
	d, err := newDriver(pool, cfg, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err = pool.Ping(ctx); err != nil {
		err = mapErr(err)
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		switch {
		case tlsFailure(err):
			err = fmt.Errorf("TLS handshake failed (check sslrootcert, sslcert, sslkey and that the server's certificate names the URL's host): %w", err)
		case errors.Is(err, backend.ErrUnavailable):
			err = fmt.Errorf("cannot reach the server (%s): %w", bound, err)
		}
	} else {
		err = d.ready(ctx)
	}
	if err != nil {
		_ = d.Shutdown(ctx)
		return nil, fmt.Errorf("postgres: %s: %w", urlkit.Redact(u), err)
	}
	return d, nil
}

// tlsFailure reports whether err is a failed TLS handshake: the server's
// certificate refused (an unknown authority, a host it does not name, an
// expired or otherwise invalid certificate) or the server's TLS alert
// (which is how it refuses a client certificate), so that Open does not
// call that a server it cannot reach.
func tlsFailure(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		alert     tls.AlertError
		unknownCA x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &unknownCA) ||
		errors.As(err, &host) || errors.As(err, &invalid)
}
