// Command fencelock is the fencelock command-line tool.
//
//	fencelock demo    play the stale-holder timeline on an embedded etcd
//	fencelock run     run a command while holding a lock
//	fencelock status  show who holds and who waits for a lock
//	fencelock bench   measure a backend: latency, grants/s, handoff time
//	fencelock conformance  run the conformance suite against a backend URL
//
// Exit status of demo: 0 on success, 1 when the stale write was accepted, 2
// for usage errors. fencelock run documents its own (fencelock run -h).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: fencelock <command> [flags]

commands:
  demo    play the stale-holder timeline on an embedded etcd server:
          A pauses past its TTL, B gets the lock, A's late write is rejected
  run     run a command while holding a lock, with its fencing token in
          FENCELOCK_TOKEN (fencelock run -h)
  status  show who holds and who waits for a lock (fencelock status -h)
  bench   measure a backend: uncontended latency, contended grants/s and
          handoff time (fencelock bench -h)
  conformance
          run the conformance suite against a backend URL, your own cluster
          included, and print a table of cases (fencelock conformance -h)
`

func main() {
	if url := os.Getenv(childEnv); url != "" {
		runConformanceChild(url)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		return demoCmd(ctx, args[1:], stdout, stderr)
	case "run":
		return runCmd(args[1:], stdout, stderr)
	case "status":
		return statusCmd(ctx, args[1:], stdout, stderr)
	case "bench":
		return benchCmd(ctx, args[1:], stdout, stderr)
	case "conformance":
		return conformanceCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "fencelock: unknown command %q\n%s", args[0], usage)
		return 2
	}
}
