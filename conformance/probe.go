package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// Bounds of URLCapabilities' checks. They are far above what a reachable
// backend needs, even on a loaded machine, and short enough that an
// unreachable one is reported in seconds rather than by every case.
const (
	// reachTimeout bounds the TCP connection to each host.
	reachTimeout = 5 * time.Second
	// probeTimeout bounds opening the URL, the scheme's profile and the
	// probe lock's acquisition and release.
	probeTimeout = 10 * time.Second
)

// URLCapabilities checks that the backend at rawURL answers and returns the
// Capabilities its adapter declares with its scheme (driver.Scheme.Suite;
// import the adapter package), or zero Capabilities if it declares none.
//
// The checks come first, so that a backend that is down fails here, at
// once, with one error rather than with every case of the suite. Each host
// of the URL must accept a TCP connection within 5s; then, within 10s, the
// URL is opened, the scheme's profile read (ZooKeeper's is read from the
// server: the session timeouts it grants) and a probe lock
// ("fencelock-conformance/probe/" and a random suffix, with the suite's
// long TTL) taken with TryAcquire and released. Errors match
// backend.ErrUnavailable and name the host and the cause, except those that
// are the URL's or the options' (backend.ErrInvalidURL, ErrInvalidOption)
// or a refusal (backend.ErrPermission).
func URLCapabilities(ctx context.Context, rawURL string) (Capabilities, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return Capabilities{}, err
	}
	scheme, ok := driver.Lookup(u.Scheme)
	if !ok {
		return Capabilities{}, fmt.Errorf("%w: unknown scheme %q in %q (known: %s; import the adapter package to register its scheme)",
			backend.ErrInvalidURL, u.Scheme, urlkit.Redact(u), strings.Join(backend.Schemes(), ", "))
	}
	// A bad URL is reported as such, before anything is dialled.
	if err := backend.CheckURL(rawURL); err != nil {
		return Capabilities{}, err
	}
	if err := reach(ctx, strings.Split(u.Host, ",")); err != nil {
		return Capabilities{}, fmt.Errorf("%w: %s: %w", backend.ErrUnavailable, urlkit.Redact(u), err)
	}

	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	unavailable := func(what string, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, known := range []error{backend.ErrInvalidURL, backend.ErrInvalidOption, backend.ErrPermission, backend.ErrUnavailable} {
			if errors.Is(err, known) {
				return fmt.Errorf("conformance: %s: %s: %w", urlkit.Redact(u), what, err)
			}
		}
		return fmt.Errorf("%w: %s: %s: %w", backend.ErrUnavailable, urlkit.Redact(u), what, err)
	}
	l, err := backend.Open(pctx, rawURL)
	if err != nil {
		return Capabilities{}, unavailable("open", err)
	}
	defer l.Close()
	var caps Capabilities
	if scheme.Suite != nil {
		p, err := scheme.Suite(pctx, u)
		if err != nil {
			return Capabilities{}, unavailable("capabilities", err)
		}
		caps = CapabilitiesOf(p)
	}
	// The probe checks that a lock can be taken, not how short a TTL
	// holds: its lease has the suite's long TTL, which a slow first write
	// (a server just started, on a loaded machine) does not outlast. A
	// 2s etcd lease did, once in five runs beside another test run.
	var opts []backend.Option
	if caps.TTL > 0 {
		opts = append(opts, backend.WithTTL(caps.longTTL()))
	}
	name := fmt.Sprintf("fencelock-conformance/probe/%016x", rand.Uint64())
	ls, err := l.TryAcquire(pctx, name, opts...)
	if err != nil {
		return Capabilities{}, unavailable("probe lock "+name, err)
	}
	if err := ls.Release(pctx); err != nil {
		return Capabilities{}, unavailable("release of probe lock "+name, err)
	}
	return caps, nil
}

// reach connects to every host over TCP, all at once, and returns what
// failed, on one line.
func reach(ctx context.Context, hosts []string) error {
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", h)
			if err != nil {
				errs[i] = err
				return
			}
			_ = c.Close()
		}()
	}
	wg.Wait()
	var failed oneLine
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return failed
}

// oneLine is errors.Join on one line: a command prints it as one.
type oneLine []error

func (e oneLine) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e oneLine) Unwrap() []error { return e }
