package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// These tests run fencelock elect and fencelock leader against a real
// server of every backend (the binary, as separate processes), and mem
// (in process: a mem:// backend lives in one process).

// electTTL is the TTL of the elections under test: a hand-over must take
// far less (it waits for no expiry), even on a busy machine.
const electTTL = 20 * time.Second

// proc is a fencelock command line started in the background.
type proc struct {
	cmd  *exec.Cmd // nil when run in process
	done chan runResult
}

// wait returns the command's result once it has exited.
func (p *proc) wait(t *testing.T) runResult {
	t.Helper()
	select {
	case r := <-p.done:
		return r
	case <-time.After(90 * time.Second):
		t.Fatal("fencelock did not exit")
		return runResult{}
	}
}

// starter starts a fencelock command line.
type starter func(t *testing.T, args ...string) *proc

// startBinary runs the fencelock binary.
func startBinary(t *testing.T, args ...string) *proc {
	t.Helper()
	return &startLive(t, true, args...).proc
}

// startInProcess runs the command line in this process, for mem://.
func startInProcess(t *testing.T, args ...string) *proc {
	t.Helper()
	return &startLive(t, false, args...).proc
}

// inProcess runs the command line in this process, as cli does, but with
// output buffers that the command's output and fencelock's own lines can
// be written to at once (a bytes.Buffer that os/exec copies into with
// ReadFrom loses what is written beside it).
func inProcess(args ...string) runResult {
	var out, errOut syncBuffer
	code := run(context.Background(), args, &out, &errOut)
	return runResult{code, out.String(), errOut.String()}
}

// syncBuffer is a bytes.Buffer that a command writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// watcher is fencelock leader --watch running in process until stop.
type watcher struct {
	out, errOut syncBuffer
	cancel      context.CancelFunc
	code        chan int
}

func startWatch(args ...string) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cancel: cancel, code: make(chan int, 1)}
	go func() { w.code <- run(ctx, append([]string{"leader", "--watch"}, args...), &w.out, &w.errOut) }()
	return w
}

// stop interrupts the watch (as SIGINT does) and returns its exit status.
func (w *watcher) stop(t *testing.T) int {
	t.Helper()
	w.cancel()
	select {
	case code := <-w.code:
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("leader --watch did not end")
		return 0
	}
}

// waitFile waits until path exists, and returns its content.
func waitFile(t *testing.T, path string, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
		select {
		case r := <-p.done:
			p.done <- r
			t.Fatalf("fencelock exited before %s was written: %+v", filepath.Base(path), r)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written", filepath.Base(path))
		}
	}
}

func parseToken(t *testing.T, s string) fencing.Token {
	t.Helper()
	tok, err := fencing.ParseToken(strings.TrimSpace(s))
	require.NoError(t, err, "FENCELOCK_TOKEN must be a token: %q", s)
	return tok
}

// electBackend is a backend the election commands are tested on.
type electBackend struct {
	testBackend
	start starter // how fencelock is started on it
}

// electBackends are the servers of every_backend_test.go, and mem.
func electBackends() []electBackend {
	var out []electBackend
	for _, b := range testBackends {
		out = append(out, electBackend{b, startBinary})
	}
	mem := testBackend{name: "mem", start: func(*testing.T) func(string) string {
		return func(prefix string) string { return "mem://" + prefix + "?ttl=6s" }
	}}
	return append(out, electBackend{mem, startInProcess})
}

// The election commands on every backend, each a real server on this
// machine (mem in process).
func TestElectLeaderOnEveryBackend(t *testing.T) {
	t.Parallel() // long, and on servers of its own
	for _, b := range electBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // a server of its own
			url := b.testBackend.start(t)
			longTTL := func(prefix string) string {
				u := url(prefix)
				require.Contains(t, u, "ttl=6s")
				return strings.Replace(u, "ttl=6s", "ttl="+electTTL.String(), 1)
			}
			t.Run("handover", func(t *testing.T) { testElectHandover(t, b.start, longTTL("cli-elect")) })
			t.Run("lost", func(t *testing.T) { testElectLost(t, b.start, url("cli-elect-lost")) })
			if b.name != "mem" { // signals go to a process of its own
				t.Run("forever", func(t *testing.T) { testElectForever(t, b.start, url("cli-elect-forever")) })
			}
			if b.down != nil {
				t.Run("unavailable", func(t *testing.T) { testLeaderUnavailable(t, b.testBackend, url("cli-leader-down")) })
			}
		})
	}
}

// testElectHandover: elect runs its command with the term, the name and
// the value; leader shows it, in text and JSON; a second candidate waits,
// and leads right after the first one's command has ended (its resignation
// hands over: no TTL wait), with a greater term; leader --watch sees both
// and then nobody; leader shows nobody at the end.
func testElectHandover(t *testing.T, start starter, url string) {
	dir := t.TempDir()
	w := startWatch("--url", url, "--interval", "50ms", "job")
	first := `echo "$FENCELOCK_TOKEN $FENCELOCK_NAME $FENCELOCK_VALUE" > "$1/a.tmp"; mv "$1/a.tmp" "$1/a"
while [ ! -e "$1/a.stop" ]; do sleep 0.02; done; date +%s%N > "$1/a.end"`
	a := start(t, "elect", "--url", url, "--name", "job", "--value", "node A", "--", "sh", "-c", first, "sh", dir)
	fields := strings.SplitN(strings.TrimSpace(waitFile(t, filepath.Join(dir, "a"), a)), " ", 3)
	require.Len(t, fields, 3, "token, name, value")
	tokA := parseToken(t, fields[0])
	assert.Equal(t, "job", fields[1], "FENCELOCK_NAME")
	assert.Equal(t, "node A", fields[2], "FENCELOCK_VALUE")

	r := cli("leader", "--url", url, "job")
	require.Equal(t, exitOK, r.code, "%+v", r)
	assert.Regexp(t, fmt.Sprintf(`^election "job": leader "node A", term %s, id \S+\n$`, tokA), r.stdout)
	r = cli("leader", "--url", url, "--json", "job")
	require.Equal(t, exitOK, r.code, "%+v", r)
	var got leaderJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.NotNil(t, got.Leader, r.stdout)
	assert.Equal(t, "job", got.Name)
	assert.Equal(t, "node A", got.Leader.Value)
	assert.Equal(t, tokA.String(), got.Leader.Token)
	assert.NotEmpty(t, got.Leader.ID)
	r = cli("status", "--url", url, "job")
	require.Equal(t, exitOK, r.code, "%+v", r)
	assert.Contains(t, r.stdout, `held by candidate "node A", token `+tokA.String(), "status shows a candidate's value")

	require.Eventually(t, func() bool { return strings.Contains(w.out.String(), `leader "node A"`) },
		30*time.Second, 20*time.Millisecond, "leader --watch did not see A: %q", w.out.String())

	second := `date +%s%N > "$1/b.start"; echo "$FENCELOCK_TOKEN" > "$1/b.tmp"; mv "$1/b.tmp" "$1/b"
while [ ! -e "$1/b.stop" ]; do sleep 0.02; done`
	b := start(t, "elect", "--url", url, "--name", "job", "--value", "node B", "--", "sh", "-c", second, "sh", dir)
	require.Eventually(t, func() bool {
		r = cli("status", "--url", url, "--json", "job")
		var st statusJSON
		return r.code == exitOK && json.Unmarshal([]byte(r.stdout), &st) == nil && len(st.Waiters) == 1
	}, 60*time.Second, 50*time.Millisecond, "the second candidate did not campaign: %+v", r)
	_, err := os.Stat(filepath.Join(dir, "b"))
	require.ErrorIs(t, err, os.ErrNotExist, "the second candidate must not lead while the first does")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.stop"), nil, 0o644))
	ra := a.wait(t)
	assert.Equal(t, exitOK, ra.code, "%+v", ra)
	assert.Empty(t, ra.stderr)
	tokB := parseToken(t, waitFile(t, filepath.Join(dir, "b"), b))
	assert.Greater(t, tokB, tokA, "the next term must be greater")
	handover := time.Duration(readNanos(t, filepath.Join(dir, "b.start")) - readNanos(t, filepath.Join(dir, "a.end")))
	assert.Less(t, handover, electTTL/4, "the resignation must hand over without waiting for the TTL (%v)", electTTL)
	t.Logf("handover from the end of the first command to the start of the second: %v", handover)

	require.Eventually(t, func() bool { return strings.Contains(w.out.String(), `leader "node B"`) },
		30*time.Second, 20*time.Millisecond, "leader --watch did not see B: %q", w.out.String())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.stop"), nil, 0o644))
	assert.Equal(t, exitOK, b.wait(t).code)

	r = cli("leader", "--url", url, "job")
	assert.Equal(t, runResult{exitOK, "election \"job\": no leader\n", ""}, r)
	r = cli("leader", "--url", url, "job", "--json") // flags after NAME too
	require.Equal(t, exitOK, r.code, "%+v", r)
	assert.JSONEq(t, `{"name": "job", "leader": null}`, r.stdout)

	require.Eventually(t, func() bool { return strings.HasSuffix(w.out.String(), "election \"job\": no leader\n") },
		30*time.Second, 20*time.Millisecond, "leader --watch did not see the end: %q", w.out.String())
	assert.Equal(t, exitOK, w.stop(t), "an interrupted watch exits 0: %s", w.errOut.String())
	lines := strings.Split(strings.TrimSpace(w.out.String()), "\n")
	var seen []string
	for _, l := range lines {
		ts, rest, ok := strings.Cut(l, " ")
		require.True(t, ok, l)
		_, err := time.Parse(time.RFC3339Nano, ts)
		require.NoError(t, err, "each line starts with its time: %q", l)
		seen = append(seen, rest)
	}
	// Leaders in order, A then B, and nobody at the end; nobody may also
	// be seen before A and between the two.
	require.Equal(t, `election "job": no leader`, seen[len(seen)-1], "leader --watch printed:\n%s", w.out.String())
	var leaders []string
	for _, s := range seen {
		if s != `election "job": no leader` {
			leaders = append(leaders, s)
		}
	}
	require.Len(t, leaders, 2, "leader --watch printed:\n%s", w.out.String())
	assert.Regexp(t, fmt.Sprintf(`^election "job": leader "node A", term %s, id \S+$`, tokA), leaders[0])
	assert.Regexp(t, fmt.Sprintf(`^election "job": leader "node B", term %s, id \S+$`, tokB), leaders[1])
	assert.Empty(t, w.errOut.String())
}

// testElectLost: a term revoked on the server (Locker.Revoke) stops the
// command, as run stops it on a lost lease, and elect exits 76; what the
// command left running, in its process group, is killed once it has
// exited.
func testElectLost(t *testing.T, start starter, url string) {
	dir := t.TempDir()
	script := `sleep 600 & echo $! > "$1/child"
trap 'touch "$1/stopped"; exit 0' TERM; echo "$FENCELOCK_TOKEN" > "$1/tok.tmp"; mv "$1/tok.tmp" "$1/tok"
while :; do sleep 0.05; done`
	p := start(t, "elect", "--url", url, "--name", "lost", "--grace", "1s", "--", "sh", "-c", script, "sh", dir)
	tok := parseToken(t, waitFile(t, filepath.Join(dir, "tok"), p))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := backend.Open(ctx, url)
	require.NoError(t, err)
	defer l.Close()
	found, err := l.Revoke(ctx, "lost", tok)
	require.NoError(t, err)
	require.True(t, found, "the term's acquisition must be found by its token")
	r := p.wait(t)
	assert.Equal(t, exitLockLost, r.code, "%+v", r)
	assert.Regexp(t, `^fencelock elect: term lost \(.*\): stopping the command\n$`, r.stderr)
	assert.FileExists(t, filepath.Join(dir, "stopped"), "the command must get SIGTERM")
	child, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "child"), p)))
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return !alive(child) }, 10*time.Second, 10*time.Millisecond,
		"the command's own child (pid %d) outlived the lost term", child)
}

// testElectForever: elect --forever campaigns again after its command
// ends, and after its term is lost (revoked: the command is stopped), each
// time with a greater term, until SIGTERM, which it passes on to the
// command; it then exits with the command's status.
func testElectForever(t *testing.T, start starter, url string) {
	dir := t.TempDir()
	script := `echo "$FENCELOCK_TOKEN" >> "$1/tokens"; n=$(wc -l < "$1/tokens")
[ "$n" -ge 2 ] || exit 0
trap 'echo "$n" >> "$1/stopped"; exit 0' TERM
touch "$1/held.$n"
while :; do sleep 0.05; done`
	p := start(t, "elect", "--url", url, "--name", "forever", "--forever", "--grace", "1s", "--", "sh", "-c", script, "sh", dir)
	waitFile(t, filepath.Join(dir, "held.2"), p)
	tokens := strings.Fields(waitFile(t, filepath.Join(dir, "tokens"), p))
	require.Len(t, tokens, 2, "one term whose command ended, then a second")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := backend.Open(ctx, url)
	require.NoError(t, err)
	defer l.Close()
	found, err := l.Revoke(ctx, "forever", parseToken(t, tokens[1]))
	require.NoError(t, err)
	require.True(t, found)

	waitFile(t, filepath.Join(dir, "held.3"), p)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r := p.wait(t)
	assert.Equal(t, exitOK, r.code, "the command's own status after SIGTERM: %+v", r)
	// One line per term that ended (the first, short, with the pause
	// before the next campaign), and one loss.
	assert.Regexp(t, `^fencelock elect: term \d+ ended after .* \(the command exited with status 0\): campaigning again in 500ms\n`+
		`fencelock elect: term lost \(.*\): stopping the command\n`+
		`fencelock elect: term \d+ ended( after .*)? \(the term was lost\): campaigning again( in 1s)?\n$`, r.stderr)
	b, err := os.ReadFile(filepath.Join(dir, "stopped"))
	require.NoError(t, err)
	assert.Equal(t, "2\n3\n", string(b), "the revoked term's command, then the last one on SIGTERM")
	b, err = os.ReadFile(filepath.Join(dir, "tokens"))
	require.NoError(t, err)
	tokens = strings.Fields(string(b))
	require.Len(t, tokens, 3, "three terms")
	for i := 1; i < len(tokens); i++ {
		assert.Greater(t, parseToken(t, tokens[i]), parseToken(t, tokens[i-1]), "terms must increase: %v", tokens)
	}
}

// testLeaderUnavailable: a backend that cannot be reached is an error
// (69), never "no leader"; leader --watch reports it "unknown" while it is
// cut off; elect cannot campaign there (69).
func testLeaderUnavailable(t *testing.T, b testBackend, url string) {
	port, err := freeport.Port()
	require.NoError(t, err)
	down := b.down(port)
	for _, args := range [][]string{
		{"leader", "--url", down, "--timeout", "3s", "job"},
		{"leader", "--url", down, "--timeout", "3s", "--json", "job"},
	} {
		r := cli(args...)
		assert.Equal(t, exitUnavailable, r.code, "%q: %+v", args, r)
		assert.Empty(t, r.stdout, "%q", args)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		assert.True(t, strings.HasPrefix(r.stderr, "fencelock leader: "), r.stderr)
	}
	r := binary(t, "elect", "--url", down, "--name", "job", "--connect-timeout", "3s", "--", "true")
	assert.Equal(t, exitUnavailable, r.code, "%+v", r)
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)

	// Through a proxy that is then cut: the watch says unknown, never no
	// leader.
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	proxy, err := faultproxy.Start(u.Host)
	require.NoError(t, err)
	defer proxy.Close()
	cutURL := strings.Replace(url, u.Host, proxy.Addr(), 1)
	w := startWatch("--url", cutURL, "--interval", "50ms", "--json", "job")
	defer w.cancel()
	require.Eventually(t, func() bool { return strings.Contains(w.out.String(), `"leader":null`) },
		60*time.Second, 20*time.Millisecond, "leader --watch: %q %q", w.out.String(), w.errOut.String())
	before := len(w.out.String())
	proxy.Cut()
	require.Eventually(t, func() bool { return strings.Contains(w.out.String()[before:], `"error":"`) },
		60*time.Second, 20*time.Millisecond, "leader --watch did not report unknown: %q", w.out.String())
	assert.Equal(t, exitOK, w.stop(t), w.errOut.String())
	lines := strings.Split(strings.TrimSpace(w.out.String()), "\n")
	var last watchJSON
	for _, l := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		assert.ElementsMatch(t, []string{"time", "name", "leader", "error"}, keys(m), l)
		require.NoError(t, json.Unmarshal([]byte(l), &last))
	}
	require.NotNil(t, last.Error, "the last line is the unknown state: %q", w.out.String())
	assert.Nil(t, last.Leader)
	assert.NotEmpty(t, *last.Error)
	assert.Len(t, lines, 2, "no leader, then unknown, and nothing else: %q", w.out.String())
}

// Bad input fails before any connection is made, with one line and the
// status of its kind: the backend here counts the connections it gets.
func TestElectLeaderBadInputBeforeDial(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var mu sync.Mutex
	dialled := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			dialled++
			mu.Unlock()
			c.Close()
		}
	}()
	url := "zk://" + ln.Addr().String() + "/x"
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"elect", "--url", url, "--name", "bad\x01name", "--", "true"}, exitInvalid},
		{[]string{"elect", "--url", url, "--name", "job", "--value", "v\x00", "--", "true"}, exitInvalid},
		{[]string{"elect", "--url", url, "--name", "job", "--value", strings.Repeat("v", backend.MaxValueLen+1), "--", "true"}, exitInvalid},
		{[]string{"elect", "--url", url, "--name", "job", "--value", "\xff", "--", "true"}, exitInvalid},
		{[]string{"elect", "--url", url, "--name", "job", "--ttl", "-1s", "--", "true"}, exitInvalid},
		{[]string{"elect", "--url", url, "--name", "job", "--max-hold", "-1s", "--", "true"}, exitInvalid},
		{[]string{"elect", "--url", url + "?bogus=1", "--name", "job", "--", "true"}, exitInvalid},
		{[]string{"elect", "--url", "nosuch://x", "--name", "job", "--", "true"}, exitInvalid},
		{[]string{"leader", "--url", url, "bad\x01name"}, exitInvalid},
		{[]string{"leader", "--url", url + "?bogus=1", "job"}, exitInvalid},
		{[]string{"leader", "--url", url, ""}, exitInvalid},
	} {
		r := cli(c.args...)
		assert.Equal(t, c.code, r.code, "%q: %+v", c.args, r)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		assert.True(t, strings.HasPrefix(r.stderr, "fencelock "+c.args[0]+": "), r.stderr)
		assert.Empty(t, r.stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, dialled, "bad input must fail before any connection")
}

// Usage errors are 64, with the one error line and a pointer to the help,
// as in every subcommand; help exits 0.
func TestElectLeaderUsage(t *testing.T) {
	t.Setenv("FENCELOCK_URL", "")
	for _, args := range [][]string{
		{"elect", "--bogus"},
		{"elect", "--url", "mem://", "--name", "x"}, // no command
		{"elect", "--name", "x", "--", "true"},      // no URL
		{"elect", "--url", "mem://", "--", "true"},  // no name
		{"elect", "--url", "mem://", "--name", "x", "--forever", "--wait-timeout", "1s", "--", "true"},
		{"elect", "--url", "mem://", "--name", "x", "--wait-timeout", "-1s", "--", "true"},
		{"elect", "--url", "mem://", "--name", "x", "--grace", "0", "--", "true"},
		{"elect", "--url", "mem://", "--name", "x", "--connect-timeout", "0", "--", "true"},
		{"elect", "--url", "mem://", "--name", "x", "--ttl", "soon", "--", "true"},
		{"leader", "--bogus"},
		{"leader", "--url", "mem://"},
		{"leader", "--url", "mem://", "a", "b"},
		{"leader", "--url", "mem://", "a", "--bogus"},
		{"leader", "x"},
		{"leader", "--url", "mem://", "--timeout", "0", "x"},
		{"leader", "--url", "mem://", "--interval", "0", "x"},
	} {
		r := cli(args...)
		assert.Equal(t, exitUsage, r.code, "%q: %+v", args, r)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if assert.Len(t, lines, 2, "%q: %q", args, r.stderr) {
			assert.True(t, strings.HasPrefix(lines[0], "fencelock "+args[0]+": "), "%q: %q", args, lines[0])
			assert.Equal(t, "run 'fencelock "+args[0]+" -h' for help", lines[1])
		}
	}
	for _, cmd := range []string{"elect", "leader"} {
		for _, h := range []string{"-h", "-help", "--help"} {
			r := cli(cmd, h)
			assert.Equal(t, exitOK, r.code, "%s %s: %+v", cmd, h, r)
			assert.Contains(t, r.stdout, "usage: fencelock "+cmd, "%s %s", cmd, h)
			assert.Empty(t, r.stderr)
		}
		r := cli("help", cmd)
		assert.Equal(t, exitOK, r.code)
		assert.Contains(t, r.stdout, "usage: fencelock "+cmd)
		assert.Contains(t, cli("help").stdout, "\n  "+cmd+" ", "listed in fencelock help")
	}
}

// The exit status and environment of elect's command, and its default
// value, in process on mem. A 10s TTL: at 3s, .ci/run at a load average
// of 21 lost a term (76) before sh had killed itself.
func TestElectStatusAndDefaultValue(t *testing.T) {
	t.Parallel()
	url := "mem://elect-status?ttl=10s"
	r := inProcess("elect", "--url", url, "--name", "s", "--", "sh", "-c", `echo "$FENCELOCK_VALUE"; exit 7`)
	assert.Equal(t, 7, r.code, "the command's own status: %+v", r)
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%s:%d\n", host, os.Getpid()), r.stdout, "the default value is hostname:pid")
	assert.Equal(t, 128+int(syscall.SIGKILL), inProcess("elect", "--url", url, "--name", "s", "--", "sh", "-c", "kill -9 $$").code)
	r = inProcess("elect", "--url", url, "--name", "s", "--", "/nonexistent/command")
	assert.Equal(t, 127, r.code, "%+v", r)
	assert.Equal(t, runResult{exitOK, "election \"s\": no leader\n", ""}, cli("leader", "--url", url, "s"), "resigned")

	// --max-hold ends the term as run's ends the lease.
	r = inProcess("elect", "--url", url, "--name", "s", "--max-hold", "1s", "--grace", "300ms", "--", "sh", "-c", `trap 'exit 0' TERM; while :; do sleep 0.05; done`)
	assert.Equal(t, exitLockLost, r.code, "%+v", r)
	assert.Equal(t, "fencelock elect: max hold of 1s reached: stopping the command\n", r.stderr)
}

// elect --wait-timeout gives the campaign up with status 75 while another
// candidate leads; it leaves nothing behind.
func TestElectWaitTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "mem://elect-wait?ttl=3s"
	l, err := backend.Open(ctx, url)
	require.NoError(t, err)
	defer l.Close()
	lease, err := l.Acquire(ctx, "w", backend.WithValue("other"))
	require.NoError(t, err)
	defer lease.Release(ctx)
	r := inProcess("elect", "--url", url, "--name", "w", "--wait-timeout", "300ms", "--", "touch", filepath.Join(t.TempDir(), "ran"))
	assert.Equal(t, exitNotAcquired, r.code, "%+v", r)
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	st, err := l.Status(ctx, "w")
	require.NoError(t, err)
	assert.Empty(t, st.Waiters, "the given-up campaign must leave nothing behind")
	r = cli("leader", "--url", url, "w")
	assert.Regexp(t, `^election "w": leader "other", term \d+, id \S+\n$`, r.stdout)
}

// leader --json and --watch --json: the keys and units of status --json.
func TestLeaderJSONSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "mem://leader-json?ttl=10s"
	l, err := backend.Open(ctx, url)
	require.NoError(t, err)
	defer l.Close()
	lease, err := l.Acquire(ctx, "job", backend.WithValue("v1"))
	require.NoError(t, err)

	r := cli("leader", "--url", url, "--json", "job")
	require.Equal(t, exitOK, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.ElementsMatch(t, []string{"name", "leader"}, keys(got))
	ld, ok := got["leader"].(map[string]any)
	require.True(t, ok, r.stdout)
	assert.Equal(t, map[string]any{"value": "v1", "token": lease.Token().String(), "id": ld["id"]}, ld)
	assert.NotEmpty(t, ld["id"])

	// A new value with the same term is a change to --watch.
	w := startWatch("--url", url, "--json", "--interval", "20ms", "job")
	require.Eventually(t, func() bool { return strings.Contains(w.out.String(), `"value":"v1"`) }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, lease.Proclaim(ctx, "v2"))
	require.Eventually(t, func() bool { return strings.Contains(w.out.String(), `"value":"v2"`) }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, lease.Release(ctx))
	require.Eventually(t, func() bool { return strings.Contains(w.out.String(), `"leader":null`) }, 30*time.Second, 10*time.Millisecond)
	assert.Equal(t, exitOK, w.stop(t))
	lines := strings.Split(strings.TrimSpace(w.out.String()), "\n")
	require.Len(t, lines, 3, w.out.String())
	for i, line := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		assert.ElementsMatch(t, []string{"time", "name", "leader", "error"}, keys(m), line)
		assert.Nil(t, m["error"], line)
		_, err := time.Parse(time.RFC3339Nano, m["time"].(string))
		assert.NoError(t, err, line)
		if i < 2 {
			assert.Equal(t, lease.Token().String(), m["leader"].(map[string]any)["token"], "same term: %s", line)
		}
	}
}

// leader --watch in the binary ends with status 0 on SIGINT and SIGTERM.
func TestLeaderWatchEndsOnSignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(fencelockBin(t), "leader", "--url", "mem://x", "--watch", "job")
		var out syncBuffer
		var errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		require.NoError(t, cmd.Start())
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "no leader") }, 30*time.Second, 20*time.Millisecond)
		require.NoError(t, cmd.Process.Signal(sig))
		err := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Errorf("%v: exit status %d: %s", sig, exit.ExitCode(), errOut.String())
		} else {
			require.NoError(t, err)
		}
	}
}

// elect --forever goes on campaigning while the backend is down: its term
// is lost (the command is stopped), it campaigns again (a campaign that
// fails is reported and made again after a pause), and it leads again,
// with a greater term, once the backend is back.
func TestElectForeverOutlivesBackendOutage(t *testing.T) {
	t.Parallel() // long, and on servers of its own
	for _, c := range []struct {
		name  string
		start func(t *testing.T) (url string, stop func(), restart func() error)
	}{
		{"etcd", func(t *testing.T) (string, func(), func() error) {
			srv := etcdtest.Start(t)
			return etcdURL(srv, "elect-outage") + "&dial_timeout=5s", srv.Stop, srv.Restart
		}},
		{"zookeeper", func(t *testing.T) (string, func(), func() error) {
			srv := zktest.Start(t)
			return "zk://" + srv.Addr() + "/elect-outage?ttl=2s", srv.Stop, srv.Restart
		}},
		{"redis", func(t *testing.T) (string, func(), func() error) {
			srv := redistest.Start(t)
			return "redis://" + srv.Addr() + "?prefix=elect-outage&ttl=2s&dial_timeout=5s", srv.Stop, srv.Restart
		}},
		{"postgres", func(t *testing.T) (string, func(), func() error) {
			srv := pgtest.Start(t)
			restart := func() error { srv.Restart(t); return nil }
			return srv.NewDatabase(t) + "&prefix=elect_outage&ttl=2s&connect_timeout=5", srv.Stop, restart
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a server of its own
			url, stop, restart := c.start(t)
			dir := t.TempDir()
			script := `echo "$FENCELOCK_TOKEN" >> "$1/tokens"; n=$(wc -l < "$1/tokens")
trap 'echo "$n" >> "$1/stopped"; exit 0' TERM
touch "$1/held.$n"
while :; do sleep 0.05; done`
			p := startBinary(t, "elect", "--url", url, "--name", "outage", "--forever", "--grace", "300ms", "--", "sh", "-c", script, "sh", dir)
			waitFile(t, filepath.Join(dir, "held.1"), p)
			stop()
			waitFile(t, filepath.Join(dir, "stopped"), p)
			time.Sleep(2 * time.Second) // campaigns meanwhile
			require.NoError(t, restart())
			waitFile(t, filepath.Join(dir, "held.2"), p)
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
			r := p.wait(t)
			assert.Equal(t, exitOK, r.code, "%+v", r)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			assert.Regexp(t, `^fencelock elect: term (lost \(.*\)|not renewed in time): stopping the command$`, lines[0])
			// The short term ends with a pause before the next campaign
			// (it must not spin), then failed campaigns wait too.
			assert.Regexp(t, `^fencelock elect: term \d+ ended( after .*)? \(the term was lost\): campaigning again( in 500ms)?$`, lines[1])
			for _, l := range lines[2:] {
				assert.Regexp(t, `^fencelock elect: .*backend unavailable.*: campaigning again in \d+(\.\d+)?m?s$`, l)
			}
			t.Logf("campaigns that failed while the backend was down: %d", len(lines)-2)
			b, err := os.ReadFile(filepath.Join(dir, "tokens"))
			require.NoError(t, err)
			tokens := strings.Fields(string(b))
			require.Len(t, tokens, 2, "two terms")
			assert.Greater(t, parseToken(t, tokens[1]), parseToken(t, tokens[0]))
		})
	}
}

// elect --forever over a command that fails at once does not spin: short
// terms are followed by a pause that doubles (0.5s, 1s, 2s ...), so in
// about 2.5s the command runs 3 times, not thousands.
func TestElectForeverDoesNotSpin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startBinary(t, "elect", "--url", "mem://spin", "--name", "spin", "--forever", "--",
		"sh", "-c", `echo run >> "$1/runs"; exit 1`, "sh", dir)
	waitFile(t, filepath.Join(dir, "runs"), p)
	time.Sleep(2500 * time.Millisecond)
	// A busy machine may not have run it a second time yet: waited for
	// (a spinning one would have run it far more than 5 times by then).
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "runs"))
		return err == nil && strings.Count(string(b), "run") >= 2
	}, 60*time.Second, 20*time.Millisecond, "elect --forever did not campaign again")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r := p.wait(t)
	// 0 when the signal came while campaigning or pausing; the command's
	// own 143 (killed by the SIGTERM passed on) when it came while the
	// command ran, as documented: on a loaded machine sh runs long enough
	// to be caught (seen in a quick-tier run at a load average of 13).
	assert.Contains(t, []int{exitOK, 128 + int(syscall.SIGTERM)}, r.code, "%+v", r)
	b, err := os.ReadFile(filepath.Join(dir, "runs"))
	require.NoError(t, err)
	runs := strings.Count(string(b), "run")
	assert.LessOrEqual(t, runs, 5, "elect --forever restarted a failing command %d times in 2.5s", runs)
	assert.Contains(t, r.stderr, "(the command exited with status 1): campaigning again in 500ms")
}
