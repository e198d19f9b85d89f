package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// DefaultPort is the client port assumed for a host given without one.
const DefaultPort = "2379"

// DefaultDialTimeout is the client's dial timeout when the URL does not set
// dial_timeout.
const DefaultDialTimeout = 5 * time.Second

// urlParams are the query parameters of etcd and etcds URLs besides the
// common ones of backend.Open; see the package documentation.
var urlParams = append([]string{"dial_timeout"}, urlkit.TLSParams...)

func init() {
	driver.Register("etcd", driver.Scheme{Params: urlParams, Open: open, Check: check, Suite: driver.StaticSuite(suiteProfile)})
	driver.Register("etcds", driver.Scheme{Params: urlParams, Open: open, Check: check, Suite: driver.StaticSuite(suiteProfile)})
}

// probeDelay is how long open waits for the cluster to answer before it
// also probes the first endpoint for a TLS mismatch (a plain URL aimed at a
// TLS port, or a TLS URL at a plain one), so that such a URL fails in well
// under dial_timeout and says why.
const probeDelay = 250 * time.Millisecond

// check is the etcd and etcds schemes' Check: parseURL, without dialling,
// and urlLimits.
func check(u *url.URL) (driver.Limits, error) {
	_, _, err := parseURL(u)
	return urlLimits, err
}

// urlLimits is what backend checks an etcd URL's ttl and drift against
// before any dial: ttlLimits, as the driver's Capabilities and CheckTTL.
var urlLimits = ttlLimits.Limits(driver.Limits{LockDelay: true})

// open opens a driver that owns its client, for backend.Open. It returns
// within dial_timeout, and when ctx ends; its error names the bound that
// ended the dial.
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	cfg, prefix, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg.Logger = clientLogger(driver.LoggerFrom(ctx))
	o := &opening{ctx: ctx, u: u, cfg: cfg, prefix: prefix,
		addr:  strings.TrimPrefix(strings.TrimPrefix(cfg.Endpoints[0], "https://"), "http://"),
		bound: urlkit.Bound(ctx, "dial_timeout", cfg.DialTimeout)}
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	client, err := o.newClient(dctx)
	if err != nil {
		return nil, err
	}
	if err := o.firstRead(dctx, cancel, client); err != nil {
		_ = client.Close()
		return nil, o.readErr(err)
	}
	return newDriver(client, prefix, true), nil
}

// opening is one open of an etcd URL: what its steps share.
type opening struct {
	ctx    context.Context // open's
	u      *url.URL
	cfg    clientv3.Config
	prefix string
	addr   string // the first endpoint's host:port, for a TLS probe
	bound  string // the bound on the dial, as errors name it
}

// unreachable wraps err, why the cluster was not reached, as
// ErrUnavailable naming the URL, TLS or not, and the bound.
func (o *opening) unreachable(err error) error {
	over := "without TLS"
	if o.cfg.TLS != nil {
		over = "over TLS"
	}
	if o.ctx.Err() != nil && !errors.Is(err, o.ctx.Err()) {
		err = fmt.Errorf("%w (%w)", o.ctx.Err(), err)
	}
	return fmt.Errorf("%w: etcd: cannot reach %s %s within %s: %w", backend.ErrUnavailable, urlkit.Redact(o.u), over, o.bound, err)
}

// newClient creates the client within dctx (the dial timeout and open's
// ctx), mapping a refused authentication to ErrPermission and a
// cluster not reached to ErrUnavailable (with what a TLS probe finds).
func (o *opening) newClient(dctx context.Context) (*clientv3.Client, error) {
	// clientv3.New authenticates a user at once, within its dial timeout
	// and its Context, which is also the client's lifetime: a context of
	// its own, cancelled if ctx ends first.
	clientCtx, cancelClient := context.WithCancel(context.Background())
	stop := context.AfterFunc(dctx, cancelClient)
	cfg := o.cfg
	cfg.Context = clientCtx
	client, err := clientv3.New(cfg)
	if !stop() {
		// ctx or the dial timeout ended first.
		if client != nil {
			_ = client.Close()
		}
		if err == nil || errors.Is(err, context.Canceled) {
			err = context.Cause(dctx)
		}
		return nil, o.unreachable(err)
	}
	if err != nil {
		cancelClient()
		if errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrPermissionDenied) {
			return nil, fmt.Errorf("%w: etcd: %s: %w", backend.ErrPermission, urlkit.Redact(o.u), err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || isUnavailable(err) {
			return nil, o.unreachable(withMismatch(dctx, o.addr, o.cfg.TLS, err))
		}
		return nil, fmt.Errorf("etcd: new client for %s: %w", urlkit.Redact(o.u), err)
	}
	return client, nil
}

// firstRead makes client's first read, within dctx, and returns its
// error, with what a TLS probe finds wrong: the probe starts if the read
// has not answered within probeDelay, and a mismatch it finds ends the
// read (cancel ends dctx).
//
// clientv3 dials lazily: one cheap read, bounded by the dial timeout,
// makes an unreachable cluster an error of Open rather than a wait that
// looks like a held lock. While it waits, a probe looks for a TLS
// mismatch, which gRPC would only report as its deadline. The read is of
// the one key "<prefix>/", inside the range every lock key is in (and
// never a lock key itself: names are not empty), so a role that may read
// and write that range and nothing else may make it, and one that may not
// is refused here, with an error that says so.
func (o *opening) firstRead(dctx context.Context, cancel context.CancelFunc, client *clientv3.Client) error {
	got := make(chan error, 1)
	go func() {
		_, err := client.Get(dctx, o.prefix+"/", clientv3.WithSerializable(), clientv3.WithCountOnly())
		got <- err
	}()
	timer := time.NewTimer(probeDelay)
	defer timer.Stop()
	select {
	case err := <-got:
		if err != nil && !errors.Is(mapErr(err), backend.ErrPermission) {
			err = withMismatch(dctx, o.addr, o.cfg.TLS, err)
		}
		return err
	case <-timer.C:
	}
	probed := make(chan error, 1)
	go func() { probed <- mismatch(dctx, o.addr, o.cfg.TLS) }()
	select {
	case err := <-got:
		if err != nil {
			if perr := <-probed; perr != nil && !errors.Is(mapErr(err), backend.ErrPermission) {
				err = fmt.Errorf("%w (%v)", err, perr)
			}
		}
		return err
	case perr := <-probed:
		if perr != nil {
			cancel()
			<-got
			return perr
		}
	}
	return <-got
}

// readErr maps the first read's error: a role that may not read the
// prefix's range is ErrPermission saying so, anything else the cluster
// not reached.
func (o *opening) readErr(err error) error {
	if merr := mapErr(err); errors.Is(merr, backend.ErrPermission) {
		return fmt.Errorf("%w: etcd: %s: the user may not read %q (it needs readwrite on the key range of prefix %q): %w",
			backend.ErrPermission, urlkit.Redact(o.u), o.prefix+"/", o.prefix+"/", err)
	}
	return o.unreachable(err)
}

// isUnavailable reports whether err is gRPC's Unavailable or
// DeadlineExceeded, as clientv3.New returns for a server it cannot
// authenticate with because it cannot reach it.
func isUnavailable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "code = Unavailable") || strings.Contains(s, "code = DeadlineExceeded") || strings.Contains(s, "context deadline exceeded")
}

// withMismatch adds to err what a probe of addr finds wrong with TLS, if
// anything (within urlkit.TLSProbeTimeout and ctx, which ends with the
// dial timeout: the probe never makes Open overstay it).
func withMismatch(ctx context.Context, addr string, tc *tls.Config, err error) error {
	if ctx.Err() != nil {
		return err
	}
	if perr := mismatch(ctx, addr, tc); perr != nil {
		return fmt.Errorf("%w (%v)", err, perr)
	}
	return err
}

// mismatch tells why TLS with addr fails for an etcds URL (tc set), or
// that addr speaks TLS for an etcd URL; nil if it finds nothing wrong.
func mismatch(ctx context.Context, addr string, tc *tls.Config) error {
	if tc != nil {
		return urlkit.CheckTLS(ctx, addr, tc)
	}
	if urlkit.SpeaksTLS(ctx, addr) {
		return errors.New(urlkit.PlainToTLSHint(addr, "etcds"))
	}
	return nil
}

// parseURL turns an etcd or etcds URL into a client configuration and a key
// prefix. Every error matches backend.ErrInvalidURL.
func parseURL(u *url.URL) (clientv3.Config, string, error) {
	bad := func(format string, args ...any) (clientv3.Config, string, error) {
		return clientv3.Config{}, "", fmt.Errorf("%w: %s: %s", backend.ErrInvalidURL, urlkit.Redact(u), fmt.Sprintf(format, args...))
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
		ep, err := urlkit.HostPort(h, DefaultPort)
		if err != nil {
			return bad("%v", err)
		}
		endpoints = append(endpoints, httpScheme+"://"+ep)
	}

	q, err := urlkit.Query(u)
	if err != nil {
		return clientv3.Config{}, "", err
	}
	// clientv3 logs every retried call at warn level, cancelled waits
	// included; errors reach the caller anyway.
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: DefaultDialTimeout, Logger: zap.NewNop()}
	if d, ok, err := urlkit.PositiveDuration(q, "dial_timeout"); err != nil {
		return clientv3.Config{}, "", err
	} else if ok {
		cfg.DialTimeout = d
	}
	if cfg.Username, cfg.Password, err = urlkit.User(u); err != nil {
		return bad("%v", err)
	}
	if cfg.Username != "" && cfg.Password == "" {
		// clientv3 would silently not authenticate.
		return bad("user %q has no password: etcd authenticates a user name with its password (etcd://user:password@host)", cfg.Username)
	}

	if cfg.TLS, err = urlkit.TLS(u, "etcds"); err != nil {
		return clientv3.Config{}, "", err
	}

	prefix := strings.TrimPrefix(u.Path, "/")
	prefix = strings.TrimRight(prefix, "/")
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return cfg, prefix, nil
}
