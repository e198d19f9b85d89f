package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// On a terminal, with fencelock in its foreground, run's command stays in
// fencelock's process group, so it reads the terminal (in a group of its
// own, a background one, SIGTTIN would stop it); a stopped fencelock's
// command is killed at the deadline all the same, by its process id.
func TestRunOnTerminal(t *testing.T) {
	controller, path := openPTY(t)
	go func() { _, _ = io.Copy(io.Discard, controller) }() // the echo, and fencelock's lines
	tty, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer tty.Close()

	dir := t.TempDir()
	script := `read x; echo "$x" > "$1/read"; echo $$ > "$1/pid.tmp"; mv "$1/pid.tmp" "$1/pid"; exec sleep 600`
	cmd := exec.Command(fencelockBin(t), "run", "--url", "mem://tty", "--lock", "a", "--ttl", "2s", "--",
		"sh", "-c", script, "sh", dir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// A session of its own, whose controlling terminal is the pty: its
	// group is the terminal's foreground group, as a shell's job is.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	exited, err := startTied(cmd)
	require.NoError(t, err)
	pgid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })

	_, err = controller.WriteString("hello\n")
	require.NoError(t, err)
	pid := waitPIDFile(t, dir, "the command did not read the terminal")
	b, err := os.ReadFile(filepath.Join(dir, "read"))
	require.NoError(t, err)
	assert.Equal(t, "hello\n", string(b))

	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	assert.Eventually(t, func() bool { return !alive(pid) }, 60*time.Second, 10*time.Millisecond,
		"the stopped fencelock's command runs on")
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("fencelock did not exit")
	}
	assert.Equal(t, exitLockLost, cmd.ProcessState.ExitCode())
}

// A fencelock stopped between its command's start and telling the watchdog
// the command's process id (on a loaded machine, tens of milliseconds in
// which the command runs) leaves the watchdog to find the command on its
// own: at the deadline it kills it all the same. The fencelock here is this
// test binary, which starts the watchdog and the command as run does and
// stops itself just before the id would be sent.
func TestRunOnTerminalStoppedBeforeTellingThePID(t *testing.T) {
	controller, path := openPTY(t)
	go func() { _, _ = io.Copy(io.Discard, controller) }()
	tty, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer tty.Close()

	dir := t.TempDir()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), stopBeforeTellingEnv+"="+dir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = cmd.Wait()
	})

	pid := waitPIDFile(t, dir, "the fake fencelock did not start its command")
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	assert.Eventually(t, func() bool { return !alive(pid) }, 60*time.Second, 10*time.Millisecond,
		"the stopped fencelock's command runs on")
}

// stopBeforeTellingEnv names the directory where the fake fencelock of
// TestRunOnTerminalStoppedBeforeTellingThePID writes its command's id.
const stopBeforeTellingEnv = "FENCELOCK_TEST_STOP_BEFORE_TELLING"

// stopBeforeTellingIfAsked is the fake fencelock, when this test binary is
// started as one: it starts the watchdog and, on the terminal, a command
// outside the watchdog's group, as run does, gives the watchdog a deadline
// 1s away, then stops itself (SIGSTOP) where run would tell the watchdog
// the command's id.
func stopBeforeTellingIfAsked() {
	dir := os.Getenv(stopBeforeTellingEnv)
	if dir == "" {
		return
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wd, err := startWatchdog()
	if err != nil {
		fail(err)
	}
	cmd := exec.Command("sleep", "600")
	if cmd.SysProcAttr = wd.attr(); !wd.alone {
		fail(fmt.Errorf("not in the terminal's foreground"))
	}
	if _, err := startTied(cmd); err != nil {
		fail(err)
	}
	// Written whole, then renamed: the test must not read a prefix of the
	// id (the id of another process, not alive, would pass it).
	tmp := filepath.Join(dir, "pid.tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "pid")); err != nil {
		fail(err)
	}
	// The deadline comes last here, run sends it before the start: a
	// watchdog whose deadline passed before the command existed, this
	// process slow on a loaded machine, would have found nothing to kill,
	// and so would the test, however the watchdog does its part.
	if err := wd.extend(time.Now().Add(time.Second)); err != nil {
		fail(err)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	// The stop takes the other threads at once, this one maybe not before
	// its next instructions: nothing follows but a wait for the test's end.
	time.Sleep(time.Hour)
	os.Exit(0)
}

// waitPIDFile waits until dir/pid holds a process id and returns it; msg
// says what failed if it does not within 60s.
func waitPIDFile(t *testing.T, dir, msg string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 60*time.Second, 20*time.Millisecond, msg)
	return pid
}

// openPTY opens a pseudo-terminal: its controller, and its terminal's path.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	controller, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { controller.Close() })
	fd := int(controller.Fd())
	require.NoError(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0)) // unlock
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	require.NoError(t, err)
	return controller, fmt.Sprintf("/dev/pts/%d", n)
}
