package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fencelock run or elect killed with SIGKILL, which can stop nothing,
// does not leave its command running without the lease: the kernel kills
// the command with it (tieAttr), and the watchdog, told of it by its pipe
// from fencelock closing, kills the command's process group: what the
// command started too; and it removes FENCELOCK_DEADLINE_FILE's directory,
// which fencelock no longer can.
func TestKilledFencelockTakesItsCommand(t *testing.T) {
	for _, c := range []struct{ command, nameFlag string }{{"run", "--lock"}, {"elect", "--name"}} {
		t.Run(c.command, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			// The command is the second sleep itself (exec): fencelock's
			// child; the first is the command's own child.
			p := startBinary(t, c.command, "--url", "mem://killed", c.nameFlag, "job", "--",
				"sh", "-c", `sleep 600 & echo "$$ $! $FENCELOCK_DEADLINE_FILE" > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 601`, "sh", pidFile)
			fields := strings.Fields(waitFile(t, pidFile, p))
			require.Len(t, fields, 3, "two processes and the deadline file")
			var pids []int
			for _, f := range fields[:2] {
				pid, err := strconv.Atoi(f)
				require.NoError(t, err)
				pids = append(pids, pid)
			}
			// startGroup's clean-up kills fencelock's group, after the
			// checks below; the command's is the watchdog's, not that one.
			for _, pid := range pids {
				require.True(t, alive(pid), "the command and its child run")
			}
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
			p.wait(t)
			for _, pid := range pids {
				assert.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 10*time.Millisecond,
					"the command or its child (pid %d) outlived fencelock %s, killed", pid, c.command)
			}
			dir := filepath.Dir(fields[2])
			assert.Eventually(t, func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) }, 10*time.Second, 10*time.Millisecond,
				"the deadline file's directory %s outlived fencelock %s, killed", dir, c.command)
		})
	}
}

// alive reports whether process pid runs (exists and is no zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}
