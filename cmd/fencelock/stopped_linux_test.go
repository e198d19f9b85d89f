package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stoppedTTL is the lease TTL of testStoppedOn: what a stopped fencelock's
// command may run for at most.
const stoppedTTL = 3 * time.Second

// testStoppedOn: a fencelock run, and a fencelock elect, SIGSTOPped while
// their command runs (and so unable to renew or to stop anything) do not
// leave the command running: the watchdog kills its process group, the
// command and what it started, at the lease's local deadline, before the
// next holder's (leader's) command starts. The command gets the deadline
// in FENCELOCK_DEADLINE and FENCELOCK_DEADLINE_FILE, which each renewal
// moves; once resumed, fencelock exits 76.
func testStoppedOn(t *testing.T, url string) {
	require.Contains(t, url, "ttl=6s")
	url = strings.Replace(url, "ttl=6s", "ttl="+stoppedTTL.String(), 1)
	for _, c := range []struct{ command, nameFlag string }{{"run", "--lock"}, {"elect", "--name"}} {
		t.Run(c.command, func(t *testing.T) {
			name := "stopped-" + c.command
			dir := t.TempDir()
			first := `echo "$FENCELOCK_DEADLINE" > "$1/env.tmp"; echo "$FENCELOCK_DEADLINE_FILE" >> "$1/env.tmp"; mv "$1/env.tmp" "$1/env"
sleep 600 & echo "$$ $!" > "$1/pids.tmp"; mv "$1/pids.tmp" "$1/pids"
exec sleep 601`
			begun := time.Now()
			a := startBinary(t, c.command, "--url", url, c.nameFlag, name, "--", "sh", "-c", first, "sh", dir)
			pids := strings.Fields(waitFile(t, filepath.Join(dir, "pids"), a))
			require.Len(t, pids, 2, "the command and its child")
			env := strings.Split(strings.TrimSpace(waitFile(t, filepath.Join(dir, "env"), a)), "\n")
			require.Len(t, env, 2, "FENCELOCK_DEADLINE, FENCELOCK_DEADLINE_FILE")
			atStart := parseDeadline(t, env[0])
			assert.True(t, atStart.After(begun) && !atStart.After(time.Now().Add(stoppedTTL)),
				"FENCELOCK_DEADLINE %v is not within a TTL from now", atStart)
			// The file holds the deadline as renewals move it.
			var last time.Time
			require.Eventually(t, func() bool {
				b, err := os.ReadFile(env[1])
				if err != nil {
					return false
				}
				last, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
				return err == nil && last.After(atStart)
			}, 60*time.Second, 20*time.Millisecond, "FENCELOCK_DEADLINE_FILE was not moved by a renewal")

			// The next holder's command records, as it starts, whether the
			// first command and its child still run.
			second := `for p in $2 $3; do cp "/proc/$p/stat" "$1/at-start.$p" 2>/dev/null; done
date +%s%N > "$1/b.tmp"; mv "$1/b.tmp" "$1/b"`
			b := startBinary(t, c.command, "--url", url, c.nameFlag, name, "--", "sh", "-c", second, "sh", dir, pids[0], pids[1])
			require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
			stopped := time.Now()
			content, err := os.ReadFile(env[1])
			require.NoError(t, err)
			last = parseDeadline(t, strings.TrimSpace(string(content)))

			rb := b.wait(t) // a command that exits once it has recorded
			require.Equal(t, exitOK, rb.code, "the next %s: %+v", c.command, rb)
			started := time.Unix(0, readNanos(t, filepath.Join(dir, "b")))
			t.Logf("stopped %v before the last deadline; the next %s's command started %v after it",
				last.Sub(stopped).Round(time.Millisecond), c.command, started.Sub(last).Round(time.Millisecond))
			for _, p := range pids {
				if stat, err := os.ReadFile(filepath.Join(dir, "at-start."+p)); err == nil {
					assert.Regexp(t, `\) [ZX] `, string(stat),
						"process %s of the stopped fencelock's command ran when the next command started", p)
				}
				pid, err := strconv.Atoi(p)
				require.NoError(t, err)
				assert.False(t, alive(pid), "process %d of the stopped fencelock's command runs", pid)
			}

			require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
			r := a.wait(t)
			assert.Equal(t, exitLockLost, r.code, "the resumed fencelock: %+v", r)
		})
	}
}

// deadlineRE is the form of FENCELOCK_DEADLINE: RFC 3339, UTC, nanoseconds.
var deadlineRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$`)

func parseDeadline(t *testing.T, s string) time.Time {
	t.Helper()
	require.Regexp(t, deadlineRE, s)
	d, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return d
}
