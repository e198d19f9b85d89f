package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/backend"
)

// job is a command that supervise runs under a lease: fencelock run's,
// or fencelock elect's under a term.
type job struct {
	verb  string        // the subcommand, which prefixes the error lines: "run", "elect"
	held  string        // what was granted, for the messages: "lease", "term"
	args  []string      // the command and its arguments
	env   []string      // added to fencelock's own environment
	grace time.Duration // between SIGTERM and SIGKILL when the lease is lost
	hold  holdLimit
}

// outcome is how a job's command ended.
type outcome struct {
	code    int  // the exit status: the command's own, exitLockLost, or 127
	started bool // false: the command could not be started (code 127)
	lost    bool // it was stopped because the lease was lost or ran out of its max hold
	stopped bool // a signal that asks to stop (stopSignals) was passed on to it
}

// stopSignals are the forwarded signals that ask fencelock to stop, not
// only its command: elect --forever campaigns no more after one.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// supervise runs the job's command under lease, watched by wd (which it
// ends), and returns how it ended: its own exit status, or exitLockLost if
// it was stopped because the lease was lost or ran out of its max hold, or
// killed by the watchdog at the deadline. Signals from sigs are passed on
// to the command. The command gets the lease's local deadline in
// FENCELOCK_DEADLINE (as it was at the start) and FENCELOCK_DEADLINE_FILE
// (the file holding the current one).
func supervise(lease *backend.Lease, wd *watchdog, j job, sigs <-chan os.Signal, stdout, stderr io.Writer) outcome {
	defer wd.finish() // on the paths where the command did not start
	deadline := lease.Deadline()
	file, err := newDeadlineFile(deadline)
	if err != nil {
		printErr(stderr, j.verb, "FENCELOCK_DEADLINE_FILE: "+err.Error())
		return outcome{code: 127}
	}
	defer file.remove()
	cmd := exec.Command(j.args[0], j.args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(append(os.Environ(), j.env...),
		"FENCELOCK_DEADLINE="+formatDeadline(deadline), "FENCELOCK_DEADLINE_FILE="+file.path)
	// Where the command is to run first (it tells the watchdog "alone"
	// on a terminal), so that the watchdog knows it before its first
	// deadline, which it may find passed at once on a loaded machine.
	cmd.SysProcAttr = wd.attr()
	// The watchdog stops the command at the deadline when fencelock,
	// stopped, cannot.
	if err := errors.Join(wd.extend(deadline), wd.leaves(file.dir)); err != nil {
		printErr(stderr, j.verb, "the watchdog has ended: "+err.Error())
		return outcome{code: 127}
	}
	// Tied to fencelock: a fencelock killed with SIGKILL, which can stop
	// nothing, must not leave the command running without the lease.
	exited, err := startTied(cmd)
	if err != nil {
		printErr(stderr, j.verb, err.Error())
		return outcome{code: 127}
	}
	_ = wd.started(cmd.Process.Pid) // fails only if the watchdog has killed

	// Each renewal moves the deadline: the watchdog and the file learn of
	// it within a tenth of the TTL (1s at most), where the deadline they
	// hold is still two thirds of the TTL away.
	poll := time.NewTicker(min(lease.TTL()/10, time.Second))
	defer poll.Stop()

	// Stop the command grace before the local deadline, so that SIGKILL
	// lands no later than the deadline, itself before the server's expiry.
	// A grace over TTL/3 would fire before the renewal due at TTL/3.
	grace := min(j.grace, lease.TTL()/3)
	stopTimer := time.NewTimer(time.Until(lease.Deadline()) - grace)
	defer stopTimer.Stop()
	out := outcome{started: true}
	var kill <-chan time.Time
	terminate := func(why string) {
		if out.lost {
			return
		}
		out.lost = true
		printErr(stderr, j.verb, why+": stopping the command")
		_ = cmd.Process.Signal(syscall.SIGTERM)
		kill = time.After(min(grace, max(time.Until(lease.Deadline()), 0)))
	}
	for {
		select {
		case <-exited:
			if out.lost {
				wd.killRest()
			}
			killed := wd.finish()
			out.code = exitStatus(cmd.ProcessState)
			if killed && out.code == 128+int(syscall.SIGKILL) && !out.lost {
				out.lost = true
				printErr(stderr, j.verb, "the "+j.held+"'s local deadline passed while fencelock could not act: the watchdog killed the command")
			}
			if out.lost {
				out.code = exitLockLost
			}
			return out
		case <-poll.C:
			if d := lease.Deadline(); d.After(deadline) {
				deadline = d
				// Neither can fail but by the watchdog's end (a kill, whose
				// exit follows) or a full disk (the file's deadline is then
				// early, never late).
				_ = wd.extend(d)
				_ = file.write(d)
			}
		case s := <-sigs:
			out.stopped = out.stopped || slices.Contains(stopSignals, s)
			_ = cmd.Process.Signal(s)
		case <-lease.Done():
			terminate(fmt.Sprintf("%s lost (%v)", j.held, stripPrefixes(lease.Err().Error())))
		case <-stopTimer.C:
			if until := time.Until(lease.Deadline()); until > grace {
				stopTimer.Reset(until - grace) // renewed meanwhile
				continue
			}
			if j.hold.reached() {
				terminate(fmt.Sprintf("max hold of %v reached", j.hold.max))
			} else {
				terminate(j.held + " not renewed in time")
			}
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
