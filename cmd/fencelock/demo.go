package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/etcd"
	"github.com/fencelock/fencelock/internal/demo"
	"github.com/fencelock/fencelock/internal/etcdtest"
)

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL (etcd: whole seconds, at least 2s)")
	url := fs.String("url", "", "play it on this backend instead of an embedded etcd (A's pause is then simulated by turning its renewals off)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *url != "" {
		return demoOnURL(ctx, *url, *ttl, stdout, stderr)
	}
	fmt.Fprintln(stdout, "fencelock demo: starting an embedded etcd server ...")
	srv, err := etcdtest.StartServer("")
	if err != nil {
		fmt.Fprintf(stderr, "fencelock demo: %v\n", err)
		return 1
	}
	defer srv.Close()
	fmt.Fprintf(stdout, "etcd at %v; lock %q, TTL %v\n\n", srv.Endpoints(), "report", *ttl)

	newClient := func() (*clientv3.Client, *backend.Locker, error) {
		c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, err
		}
		l, err := etcd.New(c, "fencelock-demo")
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return c, l, nil
	}
	clientA, lockerA, err := newClient()
	if err != nil {
		fmt.Fprintf(stderr, "fencelock demo: %v\n", err)
		return 1
	}
	defer clientA.Close()
	defer lockerA.Close()
	clientB, lockerB, err := newClient()
	if err != nil {
		fmt.Fprintf(stderr, "fencelock demo: %v\n", err)
		return 1
	}
	defer clientB.Close()
	defer lockerB.Close()

	// Freezing A closes its client: no renewal or release reaches etcd, as
	// with a stopped process, so the lease ends by expiring on the server.
	freezeA := func() { clientA.Close() }
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
			fmt.Fprintf(stderr, "fencelock demo: %v\n", err)
			return 1
		}
		defer l.Close()
		lockers[i] = l
	}
	fmt.Fprintf(stdout, "fencelock demo on %s; lock %q, TTL %v\n\n", url, "fencelock-demo", ttl)
	res, err := demo.Run(ctx, stdout, demo.Client{Locker: lockers[0]}, demo.Client{Locker: lockers[1]}, "fencelock-demo", ttl)
	return demoResult(res, err, stdout, stderr)
}

func demoResult(res demo.Result, err error, stdout, stderr io.Writer) int {
	if err != nil {
		fmt.Fprintf(stderr, "fencelock demo: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout)
	if !res.StaleRejected {
		fmt.Fprintln(stdout, "FAIL: the stale write was accepted")
		return 1
	}
	fmt.Fprintf(stdout, "OK: A's stale write (token %s) was rejected; the resource keeps B's write (token %s).\n", res.TokenA, res.TokenB)
	return 0
}
