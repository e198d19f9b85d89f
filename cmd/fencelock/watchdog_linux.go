package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The watchdog is a small process of its own, fencelock itself run as the
// hidden command watchdogCommand, that holds the lease's local deadline and
// kills the command's process group with SIGKILL when the deadline passes,
// unless fencelock has extended it: so a fencelock that is stopped
// (SIGSTOP, a debugger, a frozen cgroup), and can neither renew nor stop
// anything, does not leave its command running past the lease. It kills the
// group too when fencelock dies (its parent-death signal, or its stdin
// closing), and never after a clean end.
//
// The command runs in the watchdog's process group: the watchdog makes the
// group (it is its leader) before the command is started, so the command
// is in it from its first instruction, and so is whatever it starts,
// unless that moves to a group of its own.
//
// The protocol: fencelock writes to the watchdog's stdin one line per
// extension, the new deadline on CLOCK_MONOTONIC in nanoseconds (a clock
// every process of the system shares, which no change of the wall clock
// moves), and "done" once the command has exited; the watchdog writes
// "ready" to its stdout once it watches, and "killed" before it kills.

// watchdogCommand is the hidden command that runs the watchdog.
const watchdogCommand = "internal-watchdog"

// watchdogArgs are the watchdog's arguments: fencelock's process id (its
// parent), and the initial deadline (CLOCK_MONOTONIC, nanoseconds).
const watchdogArgs = 2

// watchdog is fencelock's side of a running watchdog.
type watchdog struct {
	cmd    *exec.Cmd
	in     *os.File // the watchdog's stdin
	exited <-chan error
	killed chan bool // whether it said "killed", once its stdout has closed
}

// startWatchdog starts a watchdog holding deadline, a lease's local
// deadline, and returns once it watches.
func startWatchdog(deadline time.Time, stderr io.Writer) (*watchdog, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the watchdog: %w", err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("the watchdog: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("the watchdog: %w", err)
	}
	cmd := exec.Command(exe, watchdogCommand, strconv.Itoa(os.Getpid()), strconv.FormatInt(monoNanos(deadline), 10))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, stderr
	// A group of its own, which the command joins; SIGTERM, which it
	// handles, when fencelock dies: it then kills the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	exited, err := startTied(cmd)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("the watchdog: %w", err)
	}
	w := &watchdog{cmd: cmd, in: inW, exited: exited, killed: make(chan bool, 1)}
	out := bufio.NewReader(outR)
	if line, err := out.ReadString('\n'); line != "ready\n" {
		inW.Close() // a watchdog that runs ends on it
		werr := <-exited
		outR.Close()
		return nil, fmt.Errorf("the watchdog did not start (%v, %v)", err, werr)
	}
	go func() {
		rest, _ := io.ReadAll(out)
		outR.Close()
		w.killed <- strings.Contains(string(rest), "killed\n")
	}()
	return w, nil
}

// groupAttr is how the command is to be started: in the watchdog's group.
func (w *watchdog) groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: w.cmd.Process.Pid}
}

// extend moves the watchdog's deadline to d (an earlier one than it holds
// changes nothing). An error means the watchdog has ended.
func (w *watchdog) extend(d time.Time) error {
	_, err := fmt.Fprintf(w.in, "%d\n", monoNanos(d))
	return err
}

// finish ends the watchdog once the command has exited, without its killing
// anything, and reports whether it had killed the group before.
func (w *watchdog) finish() bool {
	_, _ = io.WriteString(w.in, "done\n") // fails if it has killed (and so ended)
	w.in.Close()
	<-w.exited
	return <-w.killed
}

// monoNanos is the instant t on CLOCK_MONOTONIC, in nanoseconds. The clock
// is read before time.Until: a pause between the two makes the result
// earlier than t, never later.
func monoNanos(t time.Time) int64 {
	now := monoNow()
	return now + int64(time.Until(t))
}

// monoNow reads CLOCK_MONOTONIC, in nanoseconds.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // Linux has had CLOCK_MONOTONIC since 2.6
	}
	return ts.Nano()
}

// runWatchdogIfAsked runs the watchdog and exits if this process is one.
func runWatchdogIfAsked() {
	if len(os.Args) > 1 && os.Args[1] == watchdogCommand {
		os.Exit(watchdogMain(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// watchdogMain is the watchdog: it returns its exit status, or kills its
// own process group, itself included, and so does not return.
func watchdogMain(args []string, in io.Reader, out, stderr io.Writer) int {
	parent, deadline, err := parseWatchdogArgs(args)
	if err != nil {
		printErr(stderr, watchdogCommand, err.Error())
		return exitUsage
	}
	// A reader of its stdout that has gone must not end it before it kills.
	signal.Ignore(syscall.SIGPIPE)
	// SIGTERM is its parent-death signal; the others may be sent to the
	// whole group, for the command: they end nothing here.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	if os.Getppid() != parent { // died before the handler was in place
		return killGroup(out)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	if _, err := io.WriteString(out, "ready\n"); err != nil {
		return killGroup(out)
	}
	timer := time.NewTimer(time.Duration(deadline - monoNow()))
	for {
		select {
		case line, ok := <-lines:
			if !ok { // fencelock has died: its end of the pipe closed
				return killGroup(out)
			}
			if line == "done" {
				return exitOK
			}
			d, err := strconv.ParseInt(line, 10, 64)
			if err != nil { // not fencelock speaking: hold nothing longer
				return killGroup(out)
			}
			deadline = max(deadline, d)
			timer.Reset(time.Duration(deadline - monoNow()))
		case <-timer.C:
			if left := deadline - monoNow(); left > 0 {
				timer.Reset(time.Duration(left))
				continue
			}
			return killGroup(out)
		case <-sigs:
			if os.Getppid() != parent {
				return killGroup(out)
			}
		}
	}
}

// parseWatchdogArgs parses the watchdog's arguments (see watchdogArgs).
func parseWatchdogArgs(args []string) (parent int, deadline int64, err error) {
	if len(args) != watchdogArgs {
		return 0, 0, fmt.Errorf("%d arguments, want %d", len(args), watchdogArgs)
	}
	if parent, err = strconv.Atoi(args[0]); err != nil {
		return 0, 0, fmt.Errorf("parent process id: %w", err)
	}
	if deadline, err = strconv.ParseInt(args[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("deadline: %w", err)
	}
	return parent, deadline, nil
}

// killGroup says "killed" on out, and sends SIGKILL to the watchdog's
// process group: the command, what it started, and the watchdog itself.
// It returns only if the kill failed.
func killGroup(out io.Writer) int {
	_, _ = io.WriteString(out, "killed\n")
	if err := syscall.Kill(0, syscall.SIGKILL); err != nil {
		return exitFailure
	}
	select {} // SIGKILL is on its way
}
