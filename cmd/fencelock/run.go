package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/backend/mem"
	_ "github.com/fencelock/fencelock/etcd"
)

// Exit statuses of fencelock run besides the command's own.
const (
	exitUsage       = 64 // bad flags or arguments
	exitInvalid     = 65 // bad URL, lock name or option
	exitUnavailable = 69 // the backend could not be reached or failed
	exitNotAcquired = 75 // --no-wait and the lock is held, or --wait-timeout passed
	exitLockLost    = 76 // the lease was lost while the command ran; the command was stopped
)

const runUsage = `usage: fencelock run --url URL --lock NAME [flags] -- COMMAND [ARGS...]

Acquires the lock, runs COMMAND with FENCELOCK_TOKEN and FENCELOCK_LOCK in its
environment, renews the lease while it runs, and releases it when it exits.
If the lease is lost, COMMAND gets SIGTERM, then SIGKILL after --grace, timed
so that it is gone before another holder could be granted the lock. Signals
sent to fencelock are passed to COMMAND.

Exit status: COMMAND's own (128+N if killed by signal N), or
  64 usage error   65 invalid URL, name or option   69 backend unavailable
  75 not acquired (--no-wait: held; --wait-timeout: timed out)
  76 lease lost while COMMAND ran (COMMAND was stopped)

flags:
`

// forwarded are the signals passed on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func runCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, runUsage); fs.PrintDefaults() }
	url := fs.String("url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	name := fs.String("lock", "", "lock name (required)")
	ttl := fs.Duration("ttl", 0, "lease TTL (default: the URL's ttl, else 15s)")
	noWait := fs.Bool("no-wait", false, "exit with status 75 at once if the lock is held")
	waitTimeout := fs.Duration("wait-timeout", 0, "give up waiting after this long (status 75); 0 waits forever")
	maxHold := fs.Duration("max-hold", 0, "stop renewing after this long, so the lease ends within one TTL more; 0: no limit")
	grace := fs.Duration("grace", 2*time.Second, "time between SIGTERM and SIGKILL when the lease is lost (at most TTL/3)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	cmdArgs := fs.Args()
	switch {
	case len(cmdArgs) == 0:
		fmt.Fprintln(stderr, "fencelock run: no command given (put it after --)")
		return exitUsage
	case *url == "":
		fmt.Fprintln(stderr, "fencelock run: no backend URL: give --url or set FENCELOCK_URL")
		return exitUsage
	case *name == "":
		fmt.Fprintln(stderr, "fencelock run: no lock name: give --lock")
		return exitUsage
	case *noWait && *waitTimeout > 0:
		fmt.Fprintln(stderr, "fencelock run: --no-wait and --wait-timeout exclude each other")
		return exitUsage
	case *grace <= 0:
		fmt.Fprintln(stderr, "fencelock run: --grace must be positive")
		return exitUsage
	}

	// Signals that arrive before the command starts cancel the wait.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()

	locker, err := backend.Open(ctx, *url)
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
	lease, err := acquireForRun(ctx, locker, *name, *noWait, *waitTimeout, opts)
	if err != nil {
		return report(stderr, "run", err)
	}
	cancel() // from here on, signals go to the command
	defer lease.Release(context.Background())
	return supervise(lease, cmdArgs, *grace, sigs, stdout, stderr)
}

func acquireForRun(ctx context.Context, l *backend.Locker, name string, noWait bool, timeout time.Duration, opts []backend.Option) (*backend.Lease, error) {
	if noWait {
		return l.TryAcquire(ctx, name, opts...)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return l.Acquire(ctx, name, opts...)
}

// report prints err in one line and maps it to an exit status.
func report(stderr io.Writer, command string, err error) int {
	fmt.Fprintf(stderr, "fencelock %s: %v\n", command, err)
	switch {
	case errors.Is(err, backend.ErrNotAcquired):
		return exitNotAcquired
	case errors.Is(err, backend.ErrInvalidURL), errors.Is(err, backend.ErrInvalidName), errors.Is(err, backend.ErrInvalidOption):
		return exitInvalid
	default:
		return exitUnavailable
	}
}

// supervise runs the command under lease and returns the exit status.
func supervise(lease *backend.Lease, args []string, grace time.Duration, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), "FENCELOCK_TOKEN="+lease.Token().String(), "FENCELOCK_LOCK="+lease.Name())
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "fencelock run: %v\n", err)
		return 127
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	// Stop the command grace before the local deadline, so that SIGKILL
	// lands no later than the deadline, itself before the server's expiry.
	// A grace over TTL/3 would fire before the renewal due at TTL/3.
	grace = min(grace, lease.TTL()/3)
	stopTimer := time.NewTimer(time.Until(lease.Deadline()) - grace)
	defer stopTimer.Stop()
	lost := false
	var kill <-chan time.Time
	terminate := func(why string) {
		if lost {
			return
		}
		lost = true
		fmt.Fprintf(stderr, "fencelock run: %s: stopping the command\n", why)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		kill = time.After(min(grace, max(time.Until(lease.Deadline()), 0)))
	}
	for {
		select {
		case <-exited:
			if lost {
				return exitLockLost
			}
			return exitStatus(cmd.ProcessState)
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case <-lease.Done():
			terminate(fmt.Sprintf("lease lost (%v)", lease.Err()))
		case <-stopTimer.C:
			if until := time.Until(lease.Deadline()); until > grace {
				stopTimer.Reset(until - grace) // renewed meanwhile
				continue
			}
			terminate("lease not renewed in time")
		case <-kill:
			_ = cmd.Process.Kill()
		}
	}
}

func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
