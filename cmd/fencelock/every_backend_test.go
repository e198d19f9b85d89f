package main

import (
	"context"
	"encoding/json"
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// testBackend is one backend the subcommands are run against: a real local
// server, started by start, which returns a function giving the URL of a
// key prefix of its own (with a generous TTL: the CI machine is busy).
type testBackend struct {
	name  string
	start func(t *testing.T) (url func(prefix string) string)
	// down is a URL of the scheme where nothing listens.
	down func(port int) string
	// What the backend's status can tell: the holder identity (Redis keeps
	// none), the TTL left (a ZooKeeper session's is the ensemble's secret).
	holderNames, ttlLeft bool
}

var testBackends = []testBackend{
	{
		name: "etcd",
		start: func(t *testing.T) func(string) string {
			addr := strings.TrimPrefix(etcdtest.Start(t).Endpoints()[0], "http://")
			return func(prefix string) string { return "etcd://" + addr + "/" + prefix + "?ttl=6s" }
		},
		down:        func(port int) string { return fmt.Sprintf("etcd://127.0.0.1:%d/x?dial_timeout=1s", port) },
		holderNames: true, ttlLeft: true,
	},
	{
		name: "zookeeper",
		start: func(t *testing.T) func(string) string {
			addr := zktest.Start(t).Addr()
			return func(prefix string) string { return "zk://" + addr + "/" + prefix + "?ttl=6s" }
		},
		down:        func(port int) string { return fmt.Sprintf("zk://127.0.0.1:%d/x", port) },
		holderNames: true,
	},
	{
		name: "redis",
		start: func(t *testing.T) func(string) string {
			addr := redistest.Start(t).Addr()
			return func(prefix string) string { return "redis://" + addr + "?prefix=" + prefix + "&ttl=6s" }
		},
		down:    func(port int) string { return fmt.Sprintf("redis://127.0.0.1:%d?dial_timeout=1s", port) },
		ttlLeft: true,
	},
	{
		name: "postgres",
		start: func(t *testing.T) func(string) string {
			dsn := pgtest.Start(t).NewDatabase(t)
			sep := "?"
			if strings.Contains(dsn, "?") {
				sep = "&"
			}
			// A prefix is an SQL identifier: cli-run becomes cli_run.
			return func(prefix string) string {
				return dsn + sep + "prefix=" + strings.ReplaceAll(prefix, "-", "_") + "&ttl=6s"
			}
		},
		down:        func(port int) string { return fmt.Sprintf("postgres://u@127.0.0.1:%d/x?connect_timeout=1", port) },
		holderNames: true, ttlLeft: true,
	},
}

// The in-process subcommands are quiet as the binary is.
func init() { quietClientLogs() }

// Every subcommand works on every backend of the module, each a real
// server on this machine: run, status (--watch too), bench, advise,
// demo --url, chaos, and run and elect stopped (SIGSTOP) while their
// command runs.
func TestSubcommandsOnEveryBackend(t *testing.T) {
	t.Parallel() // long, and on servers of its own
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // a server of its own
			url := b.start(t)
			t.Run("run", func(t *testing.T) { testRunOn(t, url("cli-run")) })
			t.Run("status", func(t *testing.T) { testStatusOn(t, b, url("cli-status")) })
			t.Run("status-watch", func(t *testing.T) { testStatusWatchOn(t, b, url("cli-status-watch")) })
			t.Run("status-watch-outage", func(t *testing.T) { testStatusWatchOutage(t, url("cli-status-watch-outage")) })
			t.Run("bench", func(t *testing.T) { testBenchOn(t, url("cli-bench")) })
			t.Run("advise", func(t *testing.T) { testAdviseOn(t, url("cli-advise")) })
			t.Run("demo", func(t *testing.T) {
				r := cli("demo", "--url", url("cli-demo"), "--ttl", "2s")
				require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
				assert.Contains(t, r.stdout, "rejects A's write")
				assert.Contains(t, r.stdout, "OK: A's stale write")
			})
			t.Run("chaos", func(t *testing.T) { testChaosOn(t, url("cli-chaos")) })
			t.Run("stopped", func(t *testing.T) { testStoppedOn(t, url("cli-stopped")) })
			t.Run("unavailable", func(t *testing.T) {
				port, err := freeport.Port()
				require.NoError(t, err)
				down := b.down(port)
				for _, args := range [][]string{
					{"status", "--url", down, "--timeout", "3s", "x"},
					{"bench", "--url", down, "--connect-timeout", "3s", "-n", "1", "-c", "1"},
					{"advise", "--url", down, "--connect-timeout", "3s", "--duration", "1s", "x"},
				} {
					r := cli(args...)
					assert.Equal(t, exitUnavailable, r.code, "%q: %+v", args, r)
					assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
				}
				// Down is not held: a job that skips when the lock is held
				// must not skip silently when the backend is down.
				r := run1(t, "--url", down, "--lock", "x", "--no-wait", "--connect-timeout", "3s", "--", "true")
				assert.Equal(t, exitUnavailable, r.code, "%+v", r)
				assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
			})
		})
	}
}

// testRunOn: the command runs under the lock with its token; a --no-wait
// run while it holds exits 75 without running; the next holder gets a
// greater token; the command's exit status is passed on.
func testRunOn(t *testing.T, url string) {
	dir := t.TempDir()
	hold := `echo "$FENCELOCK_TOKEN" > "$1/token"; touch "$1/held"; while [ ! -e "$1/stop" ]; do sleep 0.05; done`
	holder := startRun(t, "--url", url, "--lock", "job", "--", "sh", "-c", hold, "sh", dir)
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "held")); return err == nil },
		60*time.Second, 50*time.Millisecond, "the holder did not start: %s", holder.errOut.String())
	b, err := os.ReadFile(filepath.Join(dir, "token"))
	require.NoError(t, err)
	first, err := fencing.ParseToken(strings.TrimSpace(string(b)))
	require.NoError(t, err, "FENCELOCK_TOKEN must be a token")

	r := run1(t, "--url", url, "--lock", "job", "--no-wait", "--", "touch", filepath.Join(dir, "ran"))
	assert.Equal(t, exitNotAcquired, r.code, "%+v", r)
	assert.NoFileExists(t, filepath.Join(dir, "ran"), "the command must not run while the lock is held")
	assert.True(t, strings.HasPrefix(r.stderr, "fencelock run: "), r.stderr)
	assert.Equal(t, 1, strings.Count(r.stderr, "fencelock"), "one prefix: %q", r.stderr)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
	r = holder.wait(t)
	assert.Equal(t, exitOK, r.code, "%+v", r)

	r = run1(t, "--url", url, "--lock", "job", "--", "sh", "-c", `echo "$FENCELOCK_TOKEN"; exit 7`)
	assert.Equal(t, 7, r.code, "the command's own status: %+v", r)
	second, err := fencing.ParseToken(strings.TrimSpace(r.stdout))
	require.NoError(t, err, r.stdout)
	assert.Greater(t, second, first, "the next grant's token must be greater")
}

// testStatusOn: status shows the holder and its waiter, in text and JSON,
// then the lock free.
func testStatusOn(t *testing.T, b testBackend, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	la, err := backend.Open(ctx, url+"&holder=worker-a")
	require.NoError(t, err)
	defer la.Close()
	lease, err := la.Acquire(ctx, "job")
	require.NoError(t, err)
	lb, err := backend.Open(ctx, url+"&holder=worker-b")
	require.NoError(t, err)
	defer lb.Close()
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		l, err := lb.Acquire(waitCtx, "job")
		if err == nil {
			err = l.Release(ctx)
		}
		waited <- err
	}()

	var r runResult
	require.Eventually(t, func() bool {
		r = cli("status", "--url", url, "job")
		return r.code == exitOK && strings.Contains(r.stdout, "1 waiting")
	}, 30*time.Second, 100*time.Millisecond, "%+v", r)
	name := "(unnamed holder)"
	if b.holderNames {
		name = "worker-a"
	}
	assert.Contains(t, r.stdout, fmt.Sprintf("lock %q held by %s, token %s, ", "job", name, lease.Token()))

	r = cli("status", "--url", url, "--json", "job")
	require.Equal(t, exitOK, r.code, r.stderr)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.NotNil(t, st.Holder, r.stdout)
	assert.Equal(t, "job", st.Name)
	if b.holderNames {
		assert.Equal(t, "worker-a", st.Holder.Holder)
	}
	assert.Equal(t, lease.Token().String(), st.Holder.Token)
	assert.NotEmpty(t, st.Holder.ID)
	if b.ttlLeft {
		if assert.NotNil(t, st.Holder.TTLLeftSeconds, r.stdout) {
			assert.Greater(t, *st.Holder.TTLLeftSeconds, 0.0)
			assert.LessOrEqual(t, *st.Holder.TTLLeftSeconds, 6.0, "seconds")
		}
	} else {
		assert.Nil(t, st.Holder.TTLLeftSeconds, "unknown TTL left is null: %s", r.stdout)
	}
	assert.Len(t, st.Waiters, 1, r.stdout)

	stopWaiting()
	<-waited
	require.NoError(t, lease.Release(ctx))
	require.Eventually(t, func() bool {
		r = cli("status", "--url", url, "--json", "job")
		return r.code == exitOK && strings.Contains(r.stdout, `"holder": null`) && strings.Contains(r.stdout, `"waiters": []`)
	}, 30*time.Second, 100*time.Millisecond, "%+v", r)
	r = cli("status", "--url", url, "job")
	assert.Equal(t, "lock \"job\" is free\n", r.stdout)
}

// testBenchOn: a short bench completes and reports in JSON, with the
// round trip, and a queue of waiters drains in the order it was queued.
func testBenchOn(t *testing.T, url string) {
	r := cli("bench", "--url", url, "-n", "30", "-c", "3", "--waiters", "40", "--lock", "bench", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep benchJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	assert.Equal(t, 30, rep.Uncontended.Ops)
	assert.Positive(t, rep.Uncontended.P50Seconds)
	assert.GreaterOrEqual(t, rep.Contended.Grants, 30)
	assert.Len(t, rep.Contended.GrantsPerContender, 3)
	sum := 0
	for _, n := range rep.Contended.GrantsPerContender {
		sum += n
	}
	assert.Equal(t, rep.Contended.Grants, sum)
	assert.Positive(t, rep.Contended.GrantsPerSecond)
	assert.Positive(t, rep.RoundTripSeconds)
	require.NotNil(t, rep.Queue)
	assert.Equal(t, 40, rep.Queue.Waiters)
	assert.Zero(t, rep.Queue.OutOfOrder, "grants out of queue order")
	assert.Positive(t, rep.Queue.DrainSeconds)
	assert.Empty(t, r.stderr)
}

// live is a fencelock command line running in the background, its output
// read by the test as it comes: in this process (mem://), ended by stop as
// SIGINT ends it, or as the binary, ended by stop with SIGTERM.
type live struct {
	proc
	out, errOut syncBuffer
	stop        func()
}

func startLive(t *testing.T, binary bool, args ...string) *live {
	t.Helper()
	l := &live{proc: proc{done: make(chan runResult, 1)}}
	result := func(code int) { l.done <- runResult{code, l.out.String(), l.errOut.String()} }
	if !binary {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		l.stop = cancel
		go func() { result(run(ctx, args, &l.out, &l.errOut)) }()
		return l
	}
	l.cmd = exec.Command(fencelockBin(t), args...)
	l.cmd.Stdout, l.cmd.Stderr = &l.out, &l.errOut
	exited := startGroup(t, l.cmd)
	l.stop = func() { _ = l.cmd.Process.Signal(syscall.SIGTERM) }
	go func() {
		<-exited
		result(l.cmd.ProcessState.ExitCode())
	}()
	return l
}

// startGroup starts cmd, a fencelock command line, so that neither it nor
// what it starts (run's and elect's commands, chaos's workers, the
// conformance suite's child) outlives the test: in a process group of its
// own, killed when t ends, whether it passed, failed or stopped at a
// require; and tied to the test binary (startTied), which a -timeout ends
// without any clean-up: fencelock then dies, and its command with it. The
// channel gets cmd.Wait's error once it has exited, and what it left
// holding its output has had 5s to close it.
func startGroup(t *testing.T, cmd *exec.Cmd) <-chan error {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	exited, err := startTied(cmd)
	require.NoError(t, err)
	pgid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	return exited
}

// watchHoldLen is how long testStatusWatchOn holds the lock each time.
const watchHoldLen = 200 * time.Millisecond

// testStatusWatchOn: status --watch --json, the binary, sees every grant
// and release of holds of watchHoldLen made here, one after the other,
// with increasing tokens, and counts them, none shorter than it was; it
// ends with status 0 on SIGTERM.
func testStatusWatchOn(t *testing.T, b testBackend, url string) {
	p := startLive(t, true, "status", "--url", url, "--watch", "--json", "--interval", "50ms", "--timeout", "10s", "job")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := backend.Open(ctx, url+"&holder=watched")
	require.NoError(t, err)
	defer l.Close()
	out := p.out.String
	n := waitLine(t, out, 0, `"holder":null`)
	const holds = 3
	var tokens []fencing.Token
	for range holds {
		lease, err := l.Acquire(ctx, "job")
		require.NoError(t, err)
		tokens = append(tokens, lease.Token())
		// Seen held, then held watchHoldLen more, then seen free: the watch
		// sees each start and end.
		n = waitLine(t, out, n+1, `"token":"`+lease.Token().String()+`"`)
		time.Sleep(watchHoldLen)
		require.NoError(t, lease.Release(ctx))
		n = waitLine(t, out, n+1, `"holder":null`)
	}
	p.stop()
	r := p.wait(t)
	require.Equal(t, exitOK, r.code, "%+v", r)
	assert.Empty(t, r.stderr)

	lines := watchLines(r.stdout)
	require.NotEmpty(t, lines)
	var seen []fencing.Token
	var last statusWatchJSON
	for i, line := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		assert.ElementsMatch(t, []string{"error", "holder", "holds", "name", "time", "waiters"}, keys(m), line)
		last = statusWatchJSON{}
		require.NoError(t, json.Unmarshal([]byte(line), &last), line)
		assert.Nil(t, last.Error, line)
		if i == 0 {
			assert.Nil(t, last.Holds, "no hold has ended at the start: %s", line)
		}
		if last.Holder != nil {
			tok, err := fencing.ParseToken(last.Holder.Token)
			require.NoError(t, err, line)
			if len(seen) == 0 || seen[len(seen)-1] != tok {
				seen = append(seen, tok)
			}
			if b.holderNames {
				assert.Equal(t, "watched", last.Holder.Holder, line)
			}
		}
	}
	assert.Equal(t, tokens, seen, "each holder once, in order: %s", r.stdout)
	for i := 1; i < len(seen); i++ {
		assert.Greater(t, seen[i], seen[i-1], "tokens increase: %s", r.stdout)
	}
	assert.Nil(t, last.Holder, "free at the end: %s", lines[len(lines)-1])
	require.NotNil(t, last.Holds, "the holds seen: %s", lines[len(lines)-1])
	h := *last.Holds
	assert.GreaterOrEqual(t, h.Count, uint64(holds), lines[len(lines)-1])
	assert.GreaterOrEqual(t, h.MaxSeconds, watchHoldLen.Seconds(), "a hold is never counted shorter than it was: %s", lines[len(lines)-1])
	assert.GreaterOrEqual(t, h.P50Seconds, watchHoldLen.Seconds(), "every hold was this long at least: %s", lines[len(lines)-1])
	assert.LessOrEqual(t, h.P50Seconds, h.P99Seconds)
	assert.LessOrEqual(t, h.P99Seconds, h.P999Seconds)
	assert.LessOrEqual(t, h.P999Seconds, h.MaxSeconds)
	assert.Less(t, h.MaxSeconds, 120.0, "seconds: %s", lines[len(lines)-1])
}

// testStatusWatchOutage: status --watch through a proxy that is then
// partitioned shows unknown, with the reason, goes on, and shows the lock
// again once the proxy heals; SIGTERM ends it with status 0.
func testStatusWatchOutage(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A TTL (ZooKeeper: a session timeout) longer than the partition.
	require.Contains(t, url, "ttl=6s")
	url = strings.Replace(url, "ttl=6s", "ttl=60s", 1)
	l, err := backend.Open(ctx, url)
	require.NoError(t, err)
	defer l.Close()
	lease, err := l.Acquire(ctx, "job")
	require.NoError(t, err)
	defer func() { _ = lease.Release(context.WithoutCancel(ctx)) }()

	u, err := neturl.Parse(url)
	require.NoError(t, err)
	proxy, err := faultproxy.Start(u.Host)
	require.NoError(t, err)
	defer proxy.Close()
	p := startLive(t, true, "status", "--url", strings.Replace(url, u.Host, proxy.Addr(), 1),
		"--watch", "--json", "--interval", "50ms", "--timeout", "5s", "job")
	out := p.out.String
	held := `"token":"` + lease.Token().String() + `"`
	n := waitLine(t, out, 0, held)
	proxy.Partition()
	n = waitLine(t, out, n+1, `"error":"`)
	time.Sleep(500 * time.Millisecond) // the watch goes on while it cannot read
	select {
	case r := <-p.done:
		t.Fatalf("the watch ended in the outage: %+v", r)
	default:
	}
	proxy.Heal()
	n = waitLine(t, out, n+1, held+`.*"error":null`)
	p.stop()
	r := p.wait(t)
	require.Equal(t, exitOK, r.code, "%+v", r)
	assert.Empty(t, r.stderr)

	// Held, unknown (once, not at each read), held again.
	lines := watchLines(r.stdout)
	require.Len(t, lines, 3, r.stdout)
	assert.Equal(t, 2, n, r.stdout)
	var unknown statusWatchJSON
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &unknown), lines[1])
	require.NotNil(t, unknown.Error, lines[1])
	assert.NotEmpty(t, *unknown.Error)
	assert.Nil(t, unknown.Holder, "unknown is not held: %s", lines[1])
	assert.Equal(t, []entryJSON{}, unknown.Waiters)
	assert.Nil(t, unknown.Holds, "no hold ended: %s", lines[1])
	for _, line := range []string{lines[0], lines[2]} {
		assert.Contains(t, line, held, line)
		assert.Contains(t, line, `"error":null`, line)
	}
}

// The binary's watch ends with status 0 on SIGINT and SIGTERM.
func TestStatusWatchEndsOnSignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		p := startLive(t, true, "status", "--url", "mem://x", "--watch", "job")
		require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "is free") }, 60*time.Second, 20*time.Millisecond)
		require.NoError(t, p.cmd.Process.Signal(sig))
		r := p.wait(t)
		assert.Equal(t, exitOK, r.code, "%v: %+v", sig, r)
		assert.Empty(t, r.stderr, "%v", sig)
	}
}
