package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/etcd"
	"github.com/fencelock/fencelock/internal/demo"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/faultproxy"
)

const demoUsage = `usage: fencelock demo [--url URL] [--ttl D]

Plays the stale-holder timeline: A acquires the lock, pauses past its TTL,
B gets the lock and writes, A wakes up and writes with its old token, and
the resource rejects A's write. Without --url it runs on an embedded etcd
server (A's pause is its client cut off); with --url on that backend (A's
pause is its renewals turned off).

Exit status: 0 when the stale write was rejected (also for -h), 1 when it
was accepted, 64 usage error, 65 invalid URL or TTL, 69 backend
unavailable, 77 permission denied by the backend.

flags:
`

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", demoUsage)
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL (etcd: whole seconds, 2s at least on a server with default settings)")
	url := fs.String("url", "", "play it on this backend instead of an embedded etcd (A's pause is then simulated by turning its renewals off)")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return usageErr(stderr, "demo", fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if err := checkDemoTTL(*url, *ttl); err != nil {
		return report(stderr, "demo", err)
	}
	if *url != "" {
		return demoOnURL(ctx, *url, *ttl, stdout, stderr)
	}
	fmt.Fprintln(stdout, "fencelock demo: starting an embedded etcd server ...")
	srv, err := etcdtest.StartServer("")
	if err != nil {
		return report(stderr, "demo", err)
	}
	defer srv.Close()
	fmt.Fprintf(stdout, "etcd at %v; lock %q, TTL %v\n\n", srv.Endpoints(), "report", *ttl)

	// A reaches etcd through a proxy, so that its pause can be a silent
	// connection: B dials etcd directly.
	proxyA, err := faultproxy.Start(strings.TrimPrefix(srv.Endpoints()[0], "http://"))
	if err != nil {
		return report(stderr, "demo", err)
	}
	defer proxyA.Close()
	newClient := func(endpoint string) (*clientv3.Client, *backend.Locker, error) {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, err
		}
		l, err := etcd.New(c, etcd.Config{Prefix: "fencelock-demo"})
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return c, l, nil
	}
	clientA, lockerA, err := newClient("http://" + proxyA.Addr())
	if err != nil {
		return report(stderr, "demo", err)
	}
	defer clientA.Close()
	defer lockerA.Close()
	clientB, lockerB, err := newClient(srv.Endpoints()[0])
	if err != nil {
		return report(stderr, "demo", err)
	}
	defer clientB.Close()
	defer lockerB.Close()

	// Freezing A cuts its connection: no renewal or release reaches etcd,
	// as with a stopped process, so the lease ends by expiring on the
	// server, and A's own Locker reports it lost at its local deadline.
	freezeA := proxyA.Cut
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := demo.Run(ctx, stdout, demo.Client{Locker: lockerA, Freeze: freezeA}, demo.Client{Locker: lockerB}, "report", *ttl)
	return demoResult(res, err, stdout, stderr)
}

// demoOnURL plays the timeline on the backend at url, with two Lockers of
// their own; A's pause is its renewals turned off.
func demoOnURL(ctx context.Context, url string, ttl time.Duration, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var lockers [2]*backend.Locker
	for i := range lockers {
		l, err := backend.Open(ctx, url)
		if err != nil {
			return report(stderr, "demo", err)
		}
		defer l.Close()
		lockers[i] = l
	}
	fmt.Fprintf(stdout, "fencelock demo on %s; lock %q, TTL %v\n\n", redact(url), "fencelock-demo", ttl)
	res, err := demo.Run(ctx, stdout, demo.Client{Locker: lockers[0]}, demo.Client{Locker: lockers[1]}, "fencelock-demo", ttl)
	return demoResult(res, err, stdout, stderr)
}

// demoResult reports the end of the timeline and returns the exit status.
func demoResult(res demo.Result, err error, stdout, stderr io.Writer) int {
	if err != nil {
		return report(stderr, "demo", err)
	}
	fmt.Fprintln(stdout)
	if !res.StaleRejected {
		fmt.Fprintln(stdout, "FAIL: the stale write was accepted")
		return exitFailure
	}
	fmt.Fprintf(stdout, "OK: A's stale write (token %s) was rejected; the resource keeps B's write (token %s).\n", res.TokenA, res.TokenB)
	return exitOK
}

// embeddedURL stands for the embedded etcd server when demo checks --ttl
// before starting it: the TTL must be one etcd takes.
const embeddedURL = "etcd://127.0.0.1:2379/fencelock-demo"

// checkDemoTTL reports, before any dial or server start, a URL or a --ttl
// that the backend (without --url, the embedded etcd) would refuse; demo
// has no default TTL to fall back on, so 0 is refused too.
func checkDemoTTL(url string, ttl time.Duration) error {
	if ttl == 0 {
		return fmt.Errorf("%w: --ttl must be positive, got 0s", backend.ErrInvalidOption)
	}
	if url == "" {
		url = embeddedURL
	} else if err := backend.CheckURL(url); err != nil {
		return err
	}
	return checkTTLFlags(url, ttl, 0)
}
