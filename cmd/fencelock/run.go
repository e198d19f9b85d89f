package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/urlkit"
)

const runUsage = `usage: fencelock run --url URL --lock NAME [flags] -- COMMAND [ARGS...]

Acquires the lock, runs COMMAND with FENCELOCK_TOKEN and FENCELOCK_LOCK in its
environment, renews the lease while it runs, and releases it when it exits.
If the lease is lost, or --max-hold is reached, COMMAND gets SIGTERM, then
SIGKILL after --grace, timed so that it is gone before another holder could
be granted the lock. Signals sent to fencelock are passed to COMMAND.
COMMAND also gets the lease's local deadline, on the wall clock (RFC 3339,
UTC, with nanoseconds): as it was at the start in FENCELOCK_DEADLINE, and
as each renewal moves it in the file FENCELOCK_DEADLINE_FILE names.

On Linux, COMMAND never runs on past the lease even when fencelock cannot
stop it: COMMAND runs in a process group of its own, and a watchdog
process (fencelock itself, started while the lock is awaited) sends SIGKILL
to the group (COMMAND and what it started, unless moved to a group of its
own) at the deadline if fencelock, stopped (SIGSTOP), has not extended it,
or at once if fencelock dies (SIGKILL too). fencelock, resumed, then exits
76. After a loss, what COMMAND left running in the group gets SIGKILL once
COMMAND has exited. When stdin is the terminal and fencelock is in its
foreground, COMMAND stays in fencelock's group instead, so that it can
read the terminal and gets ^C and ^Z as a shell's job does, and the
watchdog kills COMMAND alone. Elsewhere, nothing stops COMMAND while
fencelock is stopped or after it died.

Exit status: COMMAND's own (128+N if killed by signal N) when it ran to its
end, else:
  64 usage error           65 invalid URL, name or option
  69 backend unavailable   75 not acquired (--no-wait: held by someone else;
                              --wait-timeout: timed out)
  76 lease lost, or max hold reached, while COMMAND ran (COMMAND was stopped)
  77 permission denied by the backend
  127 COMMAND could not be started         0 for -h

--metrics-addr HOST:PORT serves the lock's metrics (fencelock_acquire_duration_seconds,
fencelock_leases_held, ...: see the backend package's documentation) in the
Prometheus text format at http://HOST:PORT/metrics while fencelock runs; an
address that is not HOST:PORT, or cannot be listened on, is a usage error.

flags:
`

// forwarded are the signals passed on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func runCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", runUsage)
	url := fs.String("url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	name := fs.String("lock", "", "lock name (required)")
	ttl := fs.Duration("ttl", 0, "lease TTL (default: the URL's ttl, else 15s)")
	noWait := fs.Bool("no-wait", false, "exit with status 75 at once if the lock is held")
	waitTimeout := fs.Duration("wait-timeout", 0, "give up waiting after this long (status 75); 0 waits forever")
	maxHold := fs.Duration("max-hold", 0, "stop renewing after this long, so the lease ends within one TTL more; 0: no limit")
	lockDelay := fs.Duration("lock-delay", 0, lockDelayUsage)
	grace := fs.Duration("grace", 2*time.Second, "time between SIGTERM and SIGKILL when the lease is lost (at most TTL/3)")
	connect := connectTimeoutFlag(fs)
	metricsAddr := metricsAddrFlag(fs)
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	cmdArgs := fs.Args()
	switch {
	case len(cmdArgs) == 0:
		return usageErr(stderr, "run", "no command given (put it after --)")
	case *url == "":
		return usageErr(stderr, "run", "no backend URL: give --url or set FENCELOCK_URL")
	case *name == "":
		return usageErr(stderr, "run", "no lock name: give --lock")
	case *noWait && *waitTimeout > 0:
		return usageErr(stderr, "run", "--no-wait and --wait-timeout exclude each other")
	case *waitTimeout < 0:
		return usageErr(stderr, "run", "--wait-timeout must not be negative")
	case *grace <= 0:
		return usageErr(stderr, "run", "--grace must be positive")
	case *connect <= 0:
		return usageErr(stderr, "run", "--connect-timeout must be positive")
	case *metricsAddr != "" && checkMetricsAddr(*metricsAddr) != nil:
		return usageErr(stderr, "run", checkMetricsAddr(*metricsAddr).Error())
	}
	// The URL, the name and the TTL as the backend will take them, before
	// anything is dialled.
	for _, check := range []func() error{
		func() error { return backend.CheckURL(*url) },
		func() error { return backend.ValidateName(*name) },
		func() error { return checkTTLFlags(*url, *ttl, *maxHold) },
		func() error { return checkLockDelayFlag(*url, *lockDelay) },
	} {
		if err := check(); err != nil {
			return report(stderr, "run", err)
		}
	}
	metrics, observe, err := serveMetrics(*metricsAddr)
	if err != nil {
		return usageErr(stderr, "run", err.Error())
	}
	defer metrics.close()

	// Signals that arrive before the command starts cancel the wait.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	ctx, stopWatching := untilSignal(sigs)
	defer stopWatching()

	locker, err := openWithin(ctx, *url, *connect, observe...)
	if err != nil {
		return report(stderr, "run", err)
	}
	defer locker.Close()
	var opts []backend.Option
	if *ttl != 0 {
		opts = append(opts, backend.WithTTL(*ttl))
	}
	if *maxHold != 0 {
		opts = append(opts, backend.WithMaxHold(*maxHold))
	}
	if *lockDelay != 0 {
		opts = append(opts, backend.WithLockDelay(*lockDelay))
	}
	// Up while the lock is awaited, so that the command's start does not
	// wait for it (see watchdog_linux.go).
	wd, err := startWatchdog()
	if err != nil {
		printErr(stderr, "run", err.Error())
		return 127
	}
	defer wd.finish() // if no command runs; supervise ends it otherwise
	lease, err := acquireForRun(ctx, locker, *name, *noWait, *waitTimeout, *connect, opts)
	if err != nil {
		return report(stderr, "run", err)
	}
	acquired := time.Now()
	if stopWatching() { // from here on, signals go to the command
		// The signal came as the lock was granted: it was meant to give
		// the wait up, so the command does not run.
		_ = lease.Release(context.Background())
		return report(stderr, "run", fmt.Errorf("%w: a signal arrived while acquiring %q", backend.ErrNotAcquired, *name))
	}
	defer lease.Release(context.Background())
	return supervise(lease, wd, job{
		verb: "run", held: "lease", args: cmdArgs, grace: *grace,
		env:  []string{"FENCELOCK_TOKEN=" + lease.Token().String(), "FENCELOCK_LOCK=" + lease.Name()},
		hold: holdLimit{max: effectiveMaxHold(*url, *maxHold), acquired: acquired},
	}, sigs, stdout, stderr).code
}

// untilSignal returns a context that ends when a signal arrives on sigs
// (a wait for the lock is given up then), and a function that stops
// watching sigs and reports whether a signal ended the context. Once it
// has returned, sigs is the caller's alone again (for supervise).
func untilSignal(sigs <-chan os.Signal) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	signalled := false
	go func() {
		defer close(done)
		select {
		case <-sigs:
			signalled = true
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() bool {
		cancel()
		<-done
		return signalled
	}
}

// effectiveMaxHold is the max hold the lease was acquired with: --max-hold,
// else the URL's max_hold parameter (backend.Open has validated it), else 0.
func effectiveMaxHold(rawURL string, flagValue time.Duration) time.Duration {
	if flagValue != 0 {
		return flagValue
	}
	u, err := neturl.Parse(rawURL)
	if err != nil {
		return 0
	}
	d, _, err := urlkit.Duration(u.Query(), "max_hold")
	if err != nil {
		return 0
	}
	return d
}

// holdLimit is the max hold of a lease, so that supervise can tell a lease
// that ran out of it from a lost one.
type holdLimit struct {
	max      time.Duration // 0: no limit
	acquired time.Time     // when Acquire returned, no earlier than the grant
}

// reached reports whether the max hold has passed by now. Renewals stop
// after the first one sent at or after grant + max - TTL/3 (the next would
// fall past grant + max), so the lease runs out no earlier than grant + max
// + 2*TTL/3 - drift, and supervise stops the command at most TTL/3 before
// that: with a drift margin under TTL/3 (the default is about 1%), this is
// true then if and only if the max hold stopped the renewals.
func (h holdLimit) reached() bool {
	return h.max > 0 && time.Since(h.acquired) >= h.max
}

// acquireForRun takes the lock: at once (noWait, within the connect
// timeout), or waiting up to timeout (0: no limit).
func acquireForRun(ctx context.Context, l *backend.Locker, name string, noWait bool, timeout, connect time.Duration, opts []backend.Option) (*backend.Lease, error) {
	if noWait {
		tctx, cancel := context.WithTimeout(ctx, connect)
		defer cancel()
		lease, err := l.TryAcquire(tctx, name, opts...)
		if err != nil && ctx.Err() == nil && tctx.Err() != nil && !errors.Is(err, backend.ErrUnavailable) {
			// No answer in time: whether the lock is held is unknown.
			err = fmt.Errorf("%w: no answer within --connect-timeout %v: %w", backend.ErrUnavailable, connect, err)
		}
		return lease, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return l.Acquire(ctx, name, opts...)
}
