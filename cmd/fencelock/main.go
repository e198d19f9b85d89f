// Command fencelock is the fencelock command-line tool.
//
//	fencelock run          run a command while holding a lock
//	fencelock elect        run a command while this process leads an election
//	fencelock leader       show who leads an election, or follow it (--watch)
//	fencelock status       show who holds and who waits for a lock (--watch: every change, and hold times)
//	fencelock advise       measure a lock's hold times and recommend a TTL
//	fencelock bench        measure a backend: latency, grants/s, handoff time
//	fencelock demo         play the stale-holder timeline (embedded etcd, or --url)
//	fencelock conformance  run the conformance suite against a backend URL
//	fencelock chaos        run a fault campaign and check the fenced data stayed safe
//	fencelock version      print the version, Go version, VCS revision and URL schemes
//
// Every subcommand takes a backend URL (--url, default $FENCELOCK_URL) of
// any adapter in the module: etcd://, etcds://, zk://, zks://, redis://,
// rediss://, postgres://, postgresql:// and mem:// (in-process, for trying
// things out); see backends.go.
//
// Every subcommand exits with the same statuses, after sysexits.h (run and
// elect exit with their command's own status when the command ran to its
// end):
//
//	 0  success; also explicit help (-h, --help, fencelock help [command])
//	 1  demo: the stale write was accepted; conformance: a case failed;
//	    chaos: a violation was found; advise: too few holds seen to advise
//	64  usage error: unknown command or flag, missing or extra arguments
//	65  invalid URL, lock or election name, value or option
//	69  backend unavailable (unreachable, timed out, or failed otherwise)
//	75  not acquired: the lock is held by someone else (run --no-wait), or
//	    run --wait-timeout passed; elect: the campaign was given up
//	76  lease or term lost while the command ran, or --max-hold reached
//	77  permission denied by the backend (ACL, role, credentials)
//
// Errors are printed one line each, prefixed "fencelock <command>: ".
//
// leader exits 0 whether someone leads or not, and prints which; it never
// says "no leader" when the backend could not be reached (69).
//
// status --json, leader --json and bench --json print snake_case keys, durations as
// seconds in float64 (keys ending in _seconds) and fencing tokens as
// decimal strings (JSON numbers lose precision above 2^53).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencelock/fencelock/conformance/chaos"
)

const usage = `usage: fencelock <command> [flags]

commands:
  run     run a command while holding a lock, with its fencing token in
          FENCELOCK_TOKEN (fencelock run -h)
  elect   campaign in an election and run a command while this process
          leads, with its term in FENCELOCK_TOKEN; --forever campaigns
          again when it ends (fencelock elect -h)
  leader  show who leads an election (value, term), or every change with
          --watch (fencelock leader -h)
  status  show who holds and who waits for a lock, or every change and
          the hold times seen with --watch (fencelock status -h)
  advise  measure how long a lock is held, from outside, and recommend
          a TTL: p99.9 hold + headroom + drift (fencelock advise -h)
  bench   measure a backend: uncontended latency, contended grants/s and
          handoff time (fencelock bench -h)
  demo    play the stale-holder timeline on an embedded etcd server, or on
          --url: A pauses past its TTL, B gets the lock, A's late write is
          rejected (fencelock demo -h)
  conformance
          run the conformance suite against a backend URL, your own cluster
          included, and print a table of cases (fencelock conformance -h)
  chaos   run a fault campaign (pauses, kills, partitions, latency) against
          a backend URL and check the fenced data stayed safe; writes an
          HTML report (fencelock chaos -h)
  version print the version, Go version, VCS revision and URL schemes

Backend URLs (--url, default $FENCELOCK_URL): etcd:// etcds:// zk:// zks://
redis:// rediss:// postgres:// mem://, e.g. etcd://127.0.0.1:2379/locks?ttl=10s,
zk://127.0.0.1:2181/locks, redis://127.0.0.1:6379?prefix=locks.

` + exitTable

func main() {
	chaos.WorkerMain()   // a chaos campaign's worker runs and exits here
	runWatchdogIfAsked() // so does run's and elect's watchdog
	if url := os.Getenv(childEnv); url != "" {
		runConformanceChild(url)
		return
	}
	quietClientLogs()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program name) and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], stdout, stderr)
	case "elect":
		return electCmd(args[1:], stdout, stderr)
	case "leader":
		return leaderCmd(ctx, args[1:], stdout, stderr)
	case "status":
		return statusCmd(ctx, args[1:], stdout, stderr)
	case "advise":
		return adviseCmd(ctx, args[1:], stdout, stderr)
	case "bench":
		return benchCmd(ctx, args[1:], stdout, stderr)
	case "demo":
		return demoCmd(ctx, args[1:], stdout, stderr)
	case "conformance":
		return conformanceCmd(ctx, args[1:], stdout, stderr)
	case "chaos":
		return chaosCmd(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		return versionCmd(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" {
			if !isCommand(args[1]) {
				return unknownCommand(stderr, args[1])
			}
			if len(args) > 2 {
				return helpUsageErr(stderr, fmt.Sprintf("unexpected argument %q: help takes one command name", args[2]))
			}
			return run(ctx, []string{args[1], "-h"}, stdout, stderr)
		}
		if len(args) > 1 {
			return helpUsageErr(stderr, fmt.Sprintf("unexpected argument %q after %s", args[1], args[0]))
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		return unknownCommand(stderr, args[0])
	}
}

// unknownCommand reports a command name that is none of fencelock's.
func unknownCommand(stderr io.Writer, name string) int {
	printErr(stderr, "", fmt.Sprintf("unknown command %q", name))
	fmt.Fprintln(stderr, "run 'fencelock help' for the list of commands")
	return exitUsage
}

// helpUsageErr reports a usage error of fencelock help (or -h): an
// argument too many.
func helpUsageErr(stderr io.Writer, msg string) int {
	printErr(stderr, "help", msg)
	fmt.Fprintln(stderr, "run 'fencelock help' for the list of commands")
	return exitUsage
}

// isCommand reports whether name is a subcommand with its own help.
func isCommand(name string) bool {
	switch name {
	case "run", "elect", "leader", "status", "advise", "bench", "demo", "conformance", "chaos", "version":
		return true
	}
	return false
}
