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
// the command with it (tieAttr).
func TestKilledFencelockTakesItsCommand(t *testing.T) {
	for _, c := range []struct{ command, nameFlag string }{{"run", "--lock"}, {"elect", "--name"}} {
		t.Run(c.command, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			// The command is the sleep itself (exec): fencelock's child.
			p := startBinary(t, c.command, "--url", "mem://killed", c.nameFlag, "job", "--",
				"sh", "-c", `echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 600`, "sh", pidFile)
			pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, pidFile, p)))
			require.NoError(t, err)
			// startGroup's clean-up kills it too, after the checks below.
			require.True(t, alive(pid), "the command runs")
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
			p.wait(t)
			assert.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 10*time.Millisecond,
				"the command (pid %d) outlived fencelock %s, killed", pid, c.command)
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
