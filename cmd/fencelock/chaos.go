package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock/conformance/chaos"
)

const chaosUsage = `usage: fencelock chaos --url URL [flags]

Runs a fault campaign against the lock service at URL (your own cluster
included) and checks that fenced locks kept the guarded data safe. Worker
processes (this program, re-executed) loop: acquire the lock, admit its
token at the guarded store and read a counter there, hold, write the
counter plus one through the fencing guard, release. The nemesis pauses
(SIGSTOP) and kills (SIGKILL) holders, partitions them from the lock
service and slows their links, one fault at a time; each worker reaches
the service through proxies of its own on 127.0.0.1. Server faults
(member) need servers the campaign controls: the Go package
conformance/chaos runs them on the test suite's own clusters.

Against URL, the checker counts stale writes accepted, lost updates, token
anomalies (each must be 0), overlapping holds and those the guard caught,
whether the loss signal came before the next grant after each partition,
and grants/s with the longest time without a grant after each fault kind;
porcupine checks the guarded counter is linearizable. It prints the table,
and writes DIR/report.html (the table and the timeline), DIR/timeline.html,
DIR/history.jsonl and DIR/summary.json.

Guards: file (a directory under DIR, the default), redis (--guard-url
redis://host:port/db), etcd (--guard-url http://host:port,...), sql
(--guard-url, a PostgreSQL DSN), none (no fencing: shows what is lost
without it, and is expected to fail).

Exit status: 0 no violation (also for -h), 1 a violation was found,
64 usage error, 65 invalid URL or option, 69 the backend or the guard's
store unavailable.

flags:
`

func chaosCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("chaos", chaosUsage)
	url := fs.String("url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	duration := fs.Duration("duration", time.Minute, "run at least this long")
	minGrants := fs.Int("min-grants", 0, "then run on until this many grants (at most 3×--duration)")
	workers := fs.Int("workers", 5, "worker processes")
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL")
	hold := fs.Duration("hold", 10*time.Millisecond, "longest random hold between the read and the write")
	faults := fs.String("faults", "pause,kill,partition,latency", "faults to inject, comma-separated, or none")
	guard := fs.String("guard", string(chaos.GuardFile), "the guard of the counter: file, redis, etcd, sql or none")
	guardURL := fs.String("guard-url", "", "where the guard's store is (redis, etcd, sql)")
	redisClient := fs.String("redis-client", string(chaos.RedisClientURL), "redis:// only: url (the URL's client), docs (go-redis as the redis package's docs build it) or no-context-timeout (docs without ContextTimeoutEnabled)")
	out := fs.String("out", "chaos-report", "directory for the report and the history")
	seed := fs.Int64("seed", 0, "seed of the fault schedule (0: from the clock)")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	switch {
	case *url == "":
		return usageErr(stderr, "chaos", "no backend URL: give --url or set FENCELOCK_URL")
	case fs.NArg() != 0:
		return usageErr(stderr, "chaos", "chaos takes no arguments after the flags")
	}
	kinds, err := chaos.ParseFaults(*faults)
	if err != nil {
		return report(stderr, "chaos", err)
	}
	c := chaos.Config{
		URL: *url, Workers: *workers, TTL: *ttl, HoldMax: *hold, Duration: *duration,
		MinGrants: *minGrants, Faults: kinds, Guard: chaos.Guard(*guard), GuardURL: *guardURL,
		RedisClient: chaos.RedisClient(*redisClient),
		Out:         *out, Seed: *seed, Log: stderr,
	}
	res, err := chaos.Run(ctx, c)
	if res != nil {
		_ = res.Summary.WriteText(stdout)
		if err == nil || errors.Is(err, chaos.ErrViolation) { // the files are written
			fmt.Fprintf(stdout, "report: %s\n", filepath.Join(res.Dir, "report.html"))
		}
	}
	switch {
	case errors.Is(err, chaos.ErrViolation):
		return exitFailure
	case err != nil:
		return report(stderr, "chaos", err)
	}
	return exitOK
}
