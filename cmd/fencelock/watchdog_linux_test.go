package main

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// watched is a command in a watchdog's process group, as supervise starts
// one: a shell that has started a sleep of its own (the grandchild).
type watched struct {
	wd         *watchdog
	cmd        *exec.Cmd
	exited     <-chan error
	grandchild int
}

// startWatched starts a watchdog holding deadline, and the command script
// in its group, as supervise does; script is run by sh after it has started
// the grandchild.
func startWatched(t *testing.T, deadline time.Time, script string) *watched {
	t.Helper()
	wd, err := startWatchdog()
	require.NoError(t, err)
	pgid := wd.cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	require.NoError(t, wd.extend(deadline))
	cmd := exec.Command("sh", "-c", `sleep 600 & echo $!; `+script)
	cmd.SysProcAttr = wd.attr()
	// A pipe of the test's own: cmd.Wait would close StdoutPipe's.
	out, in, err := os.Pipe()
	require.NoError(t, err)
	defer out.Close()
	cmd.Stdout = in
	exited, err := startTied(cmd)
	in.Close()
	require.NoError(t, err)
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	gc, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err)
	return &watched{wd: wd, cmd: cmd, exited: exited, grandchild: gc}
}

// waitKilled waits until the command has exited, and checks that SIGKILL
// ended it and its grandchild, and that the watchdog says it killed them.
func (w *watched) waitKilled(t *testing.T) {
	t.Helper()
	select {
	case <-w.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the command was not killed")
	}
	assert.Equal(t, 128+int(syscall.SIGKILL), exitStatus(w.cmd.ProcessState), "the command's end")
	assert.Eventually(t, func() bool { return !alive(w.grandchild) }, 10*time.Second, 10*time.Millisecond,
		"the command's own child (pid %d) outlived the kill", w.grandchild)
	assert.True(t, w.wd.finish(), "the watchdog reports the kill")
}

// The deadline passes without an extension: the watchdog kills the
// command's process group, not before the deadline.
func TestWatchdogKillsAtDeadline(t *testing.T) {
	deadline := time.Now().Add(2 * time.Second)
	w := startWatched(t, deadline, "exec sleep 601")
	w.waitKilled(t)
	assert.False(t, time.Now().Before(deadline), "killed before the deadline")
}

// An extended deadline holds: the command outlives the first deadline, and
// is killed once the extended one passes, not before.
func TestWatchdogExtended(t *testing.T) {
	first := time.Now().Add(2 * time.Second)
	w := startWatched(t, first, "exec sleep 601")
	second := first.Add(3 * time.Second)
	require.NoError(t, w.wd.extend(second))
	require.NoError(t, w.wd.extend(first), "an earlier deadline changes nothing")
	time.Sleep(time.Until(first) + time.Second)
	select {
	case <-w.exited:
		t.Fatalf("killed at the first deadline, though extended: %v", w.cmd.ProcessState)
	default:
	}
	assert.True(t, alive(w.grandchild))
	w.waitKilled(t)
	assert.False(t, time.Now().Before(second), "killed before the extended deadline")
}

// fencelock's end of the pipe closes, as when fencelock dies: the watchdog
// kills the group at once, long before the deadline.
func TestWatchdogPipeClosed(t *testing.T) {
	deadline := time.Now().Add(10 * time.Minute)
	w := startWatched(t, deadline, "exec sleep 601")
	require.NoError(t, w.wd.in.Close())
	w.waitKilled(t)
	assert.True(t, time.Now().Before(deadline))
}

// After a clean end ("done", once the command has exited), the watchdog
// kills nothing: what the command left running in its group (its own to
// stop) outlives the deadline.
func TestWatchdogCleanExit(t *testing.T) {
	deadline := time.Now().Add(2 * time.Second)
	w := startWatched(t, deadline, "exit 3")
	select {
	case <-w.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the command did not exit")
	}
	assert.Equal(t, 3, exitStatus(w.cmd.ProcessState))
	assert.False(t, w.wd.finish(), "nothing killed")
	assert.False(t, alive(w.wd.cmd.Process.Pid), "the watchdog has ended")
	time.Sleep(time.Until(deadline) + time.Second)
	assert.True(t, alive(w.grandchild), "killed after a clean end")
}
