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
// group too when fencelock dies, and never after a clean end.
//
// Its tie to fencelock is its stdin, a pipe whose other end only fencelock
// holds: it closes when fencelock dies, however it dies, after what
// fencelock wrote before. A parent-death signal would add nothing but a race
// with that order (fencelock dying just after "done"), and one that ends the
// watchdog (SIGKILL) would leave the group running, so the watchdog has none:
// it ends at once when the pipe closes, and at the deadline at the latest.
//
// The command runs in the watchdog's process group: the watchdog makes the
// group (it is its leader) before the command is started, so the command
// is in it from its first instruction, and so is whatever it starts,
// unless that moves to a group of its own. Not so when fencelock's stdin
// is the terminal and fencelock is in its foreground: the command then
// stays in fencelock's group, as any shell job's process, so that it can
// read the terminal (a background group is stopped by SIGTTIN) and gets ^C
// and ^Z with fencelock; the watchdog, told its process id right after its
// start, kills the command alone. fencelock says "alone" before it starts
// such a command: a fencelock stopped between the command's start and the
// line with its process id (on a loaded machine, tens of milliseconds in
// which the command runs) leaves the watchdog without the id, and the
// watchdog then kills every child of fencelock but itself: the command.
//
// The protocol: fencelock writes to the watchdog's stdin the deadline on
// CLOCK_MONOTONIC in nanoseconds (a clock every process of the system
// shares, which no change of the wall clock moves), one line per extension,
// the first before it starts the command; "alone" before it starts the
// command outside the watchdog's group (on a terminal), and "pid N" once
// the command, N, has started there; "dir D", the
// directory of FENCELOCK_DEADLINE_FILE, which the watchdog removes should
// fencelock die; and "done" once the command has exited (or when no
// command is to run). The watchdog writes "killed" to its stdout before it
// kills. fencelock starts the watchdog before it waits for the lock (or the
// term), so that the watchdog is up, and costs the start of the command
// next to nothing, when the lock is granted; it does not wait for it to be
// up (the deadline is on a clock both share, so when the watchdog reads it
// does not matter), but waits for it to end before it goes on after the
// command's end.

// watchdogCommand is the hidden command that runs the watchdog.
const watchdogCommand = "internal-watchdog"

// watchdog is fencelock's side of a running watchdog.
type watchdog struct {
	cmd    *exec.Cmd
	in     *os.File  // the watchdog's stdin
	killed chan bool // whether it said "killed", once its stdout has closed
	alone  bool      // the command is outside the watchdog's group (attr)
	ended  bool      // finish has run
	kill   bool      // what finish found
}

// startWatchdog starts a watchdog, which holds no deadline until extend
// gives it one, and returns once its process group exists. Its stderr is
// fencelock's own (os.Stderr: a writer of run's, which os/exec would copy
// into beside the command's copy, could be written by both at once), for
// what goes wrong before it watches.
func startWatchdog() (*watchdog, error) {
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
	cmd := exec.Command(exe, watchdogCommand)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	// A group of its own, which the command joins.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("the watchdog: %w", err)
	}
	w := &watchdog{cmd: cmd, in: inW, killed: make(chan bool, 1)}
	go func() {
		said, _ := io.ReadAll(outR)
		outR.Close()
		w.killed <- strings.Contains(string(said), "killed\n")
	}()
	return w, nil
}

// attr is how the command is to be started: in the watchdog's group, or
// in fencelock's (nil) when stdin is the terminal whose foreground
// fencelock is in. Once started, it is to be passed to started.
func (w *watchdog) attr() *syscall.SysProcAttr {
	fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	if w.alone = err == nil && fg == syscall.Getpgrp(); w.alone {
		// Fails only if the watchdog has killed, and so ended.
		_, _ = io.WriteString(w.in, "alone\n")
		return nil
	}
	return &syscall.SysProcAttr{Setpgid: true, Pgid: w.cmd.Process.Pid}
}

// started tells the watchdog the command's process id if it is outside
// the watchdog's group. An error means the watchdog has ended.
func (w *watchdog) started(pid int) error {
	if !w.alone {
		return nil
	}
	_, err := fmt.Fprintf(w.in, "pid %d\n", pid)
	return err
}

// leaves tells the watchdog the directory of FENCELOCK_DEADLINE_FILE, for
// it to remove should fencelock die. An error means the watchdog has ended.
func (w *watchdog) leaves(dir string) error {
	_, err := fmt.Fprintf(w.in, "dir %s\n", dir)
	return err
}

// killRest sends SIGKILL to the watchdog's group, once the command has
// exited after its lease was lost: what the command left running there
// must not outlive the lease either. The watchdog goes with it. When the
// command ran outside the group (on a terminal), there is nothing to kill.
func (w *watchdog) killRest() {
	if !w.alone {
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// extend sets the watchdog's deadline, or moves it to d (an earlier one
// than it holds changes nothing). An error means the watchdog has ended.
func (w *watchdog) extend(d time.Time) error {
	_, err := fmt.Fprintf(w.in, "%d\n", monoNanos(d))
	return err
}

// finish ends the watchdog, once the command has exited or when none is to
// run, without its killing anything, and reports whether it had killed the
// group before. Calls after the first return the first one's result.
func (w *watchdog) finish() bool {
	if w.ended {
		return w.kill
	}
	w.ended = true
	_, _ = io.WriteString(w.in, "done\n") // fails if it has killed (and so ended)
	w.in.Close()
	w.kill = <-w.killed
	_ = w.cmd.Wait()
	return w.kill
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
	if len(args) != 0 {
		printErr(stderr, watchdogCommand, "no arguments expected")
		return exitUsage
	}
	// Signals sent to the whole group, for the command, end nothing here;
	// nor does a reader of its stdout that has gone (fencelock died), which
	// must not end it before it kills.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	// Buffered: a line read is handed over at once, so that an expiry
	// seen meanwhile finds it (see pending).
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	parent := os.Getppid() // fencelock, unless it has died already
	var deadline int64
	armed := false   // no deadline before the first line
	outside := false // the command is (to be) outside the group
	alone := 0       // the command's process id, once told
	dir := ""        // FENCELOCK_DEADLINE_FILE's directory
	// expire kills at the deadline, fencelock alive but not acting: the
	// command outside the group is found among fencelock's children if
	// fencelock was stopped before it could tell its id.
	expire := func() int {
		victims := []int{alone}
		if outside && alone == 0 && os.Getppid() == parent {
			victims = childrenOf(parent, os.Getpid())
		}
		return killGroup(out, victims...)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var line string
		var ok bool
		select {
		case line, ok = <-lines:
		case <-timer.C:
			if left := deadline - monoNow(); left > 0 {
				timer.Reset(time.Duration(left))
				continue
			}
			// fencelock may have extended the deadline in time, this
			// process only slow to read it (started late on a loaded
			// machine): a line read or still in the pipe is taken first.
			select {
			case line, ok = <-lines:
			default:
				if pending(in) {
					timer.Reset(time.Millisecond)
					continue
				}
				return expire()
			}
		}
		if !ok { // fencelock has died: its end of the pipe closed
			if dir != "" {
				_ = os.RemoveAll(dir) // fencelock cannot
			}
			return killGroup(out, alone)
		}
		if line == "done" {
			return exitOK
		}
		if line == "alone" {
			outside = true
			continue
		}
		if d, ok := strings.CutPrefix(line, "dir "); ok {
			dir = d
			continue
		}
		if p, ok := strings.CutPrefix(line, "pid "); ok {
			pid, err := strconv.Atoi(p)
			if err != nil { // not fencelock speaking
				return killGroup(out, alone)
			}
			alone = pid
			continue
		}
		d, err := strconv.ParseInt(line, 10, 64)
		if err != nil { // not fencelock speaking: hold nothing longer
			return killGroup(out, alone)
		}
		if !armed || d > deadline {
			armed, deadline = true, d
			timer.Reset(time.Duration(deadline - monoNow()))
		}
	}
}

// pending reports whether in, the pipe from fencelock, holds bytes not
// read yet.
func pending(in io.Reader) bool {
	f, ok := in.(*os.File)
	if !ok {
		return false
	}
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ) // FIONREAD, which pipes answer too
	return err == nil && n > 0
}

// childrenOf returns the process ids of parent's children but except,
// read from /proc.
func childrenOf(parent, except int) []int {
	entries, _ := os.ReadDir("/proc")
	ppid := strconv.Itoa(parent)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == except {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid ...", where comm may hold anything but
		// what follows it holds no ")".
		i := strings.LastIndexByte(string(stat), ')')
		if fields := strings.Fields(string(stat[i+1:])); i > 0 && len(fields) > 1 && fields[1] == ppid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killGroup says "killed" on out, sends SIGKILL to each process of
// outside (the command, outside the group; 0 for none), and to the
// watchdog's process group: the command, what it started, and the watchdog
// itself. It returns only if the kill failed.
func killGroup(out io.Writer, outside ...int) int {
	_, _ = io.WriteString(out, "killed\n")
	for _, pid := range outside {
		if pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := syscall.Kill(0, syscall.SIGKILL); err != nil {
		return exitFailure
	}
	select {} // SIGKILL is on its way
}
