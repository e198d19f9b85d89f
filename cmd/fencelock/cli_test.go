package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/freeport"
)

// These tests cover what every subcommand shares: help, usage errors, exit
// statuses, error lines, JSON naming, the progress bar and the version.

// cli runs the command line in process.
func cli(args ...string) runResult {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return runResult{code, out.String(), errOut.String()}
}

// binary runs the built fencelock binary (main included: client logging,
// os.Exit) and returns its exit status and output; see startGroup.
func binary(t *testing.T, args ...string) runResult {
	t.Helper()
	cmd := exec.Command(fencelockBin(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := <-startGroup(t, cmd)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return runResult{cmd.ProcessState.ExitCode(), out.String(), errOut.String()}
}

// Explicit help exits 0 and prints the usage on stdout, for every
// subcommand and every spelling.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "status", "advise", "bench", "demo", "conformance", "chaos", "version"} {
		for _, h := range []string{"-h", "-help", "--help"} {
			r := cli(cmd, h)
			assert.Equal(t, exitOK, r.code, "%s %s: %+v", cmd, h, r)
			assert.Contains(t, r.stdout, "usage: fencelock "+cmd, "%s %s", cmd, h)
			assert.Empty(t, r.stderr, "%s %s", cmd, h)
		}
		r := cli("help", cmd)
		assert.Equal(t, exitOK, r.code, "help %s", cmd)
		assert.Contains(t, r.stdout, "usage: fencelock "+cmd)
	}
	for _, h := range []string{"help", "-h", "-help", "--help"} {
		r := cli(h)
		assert.Equal(t, exitOK, r.code, h)
		assert.Contains(t, r.stdout, "usage: fencelock <command>")
		assert.Contains(t, r.stdout, "zk://")
		assert.Contains(t, r.stdout, "redis://")
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	t.Parallel()
	r := cli("nosuch")
	assert.Equal(t, exitUsage, r.code)
	assert.Equal(t, "fencelock: unknown command \"nosuch\"\nrun 'fencelock help' for the list of commands\n", r.stderr)
	assert.Empty(t, r.stdout)
	r = cli("--nosuch")
	assert.Equal(t, exitUsage, r.code)
	r = cli("help", "nosuch")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `unknown command "nosuch"`)
	r = cli()
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "usage: fencelock <command>")
	// The binary too: not 2 (the flag package's) nor 0.
	assert.Equal(t, exitUsage, binary(t, "nosuch").code)
}

// A usage error is 64 in every subcommand, with one prefixed error line
// and a pointer to the help.
func TestUsageErrorsAre64(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--bogus"},
		{"run", "--url", "mem://", "--lock", "x"}, // no command
		{"run", "--lock", "x", "--", "true"},      // no URL
		{"run", "--url", "mem://", "--", "true"},  // no lock
		{"run", "--url", "mem://", "--lock", "x", "--no-wait", "--wait-timeout", "1s", "--", "true"},
		{"run", "--url", "mem://", "--lock", "x", "--ttl", "soon", "--", "true"},
		{"run", "--url", "mem://", "--lock", "x", "--connect-timeout", "0", "--", "true"},
		{"run", "--url", "mem://", "--lock", "x", "--grace", "0", "--", "true"},
		{"status", "--bogus"},
		{"status", "--url", "mem://"},
		{"status", "--url", "mem://", "a", "b"},
		{"status", "x"},
		{"bench", "--bogus"},
		{"bench"},
		{"bench", "--url", "mem://", "-n", "0"},
		{"bench", "--url", "mem://", "--connect-timeout", "0"},
		{"status", "--url", "mem://", "--timeout", "0", "x"},
		{"bench", "--url", "mem://", "extra"},
		{"bench", "--url", "mem://", "--waiters", "-1"},
		{"demo", "--bogus"},
		{"demo", "extra"},
		{"version", "--bogus"},
		{"version", "extra"},
		{"conformance", "--bogus"},
		{"conformance"},
		{"conformance", "mem://", "extra"},
		{"chaos", "--bogus"},
		{"chaos"},
		{"chaos", "--url", "etcd://127.0.0.1:1/x", "extra"},
	} {
		t.Setenv("FENCELOCK_URL", "")
		r := cli(args...)
		assert.Equal(t, exitUsage, r.code, "%q: %+v", args, r)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if assert.Len(t, lines, 2, "%q: %q", args, r.stderr) {
			assert.True(t, strings.HasPrefix(lines[0], "fencelock "+args[0]+": "), "%q: %q", args, lines[0])
			assert.Equal(t, "run 'fencelock "+args[0]+" -h' for help", lines[1])
		}
	}
}

// exitCode is the one mapping every subcommand uses.
func TestExitCodeMapping(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("fencelock: acquire %q: %w", "x", err) }
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{wrap(backend.ErrInvalidURL), 65},
		{wrap(backend.ErrInvalidName), 65},
		{wrap(backend.ErrInvalidOption), 65},
		{wrap(backend.ErrUnavailable), 69},
		{wrap(backend.ErrNotAcquired), 75},
		{wrap(fmt.Errorf("%w: %w", backend.ErrNotAcquired, context.DeadlineExceeded)), 75},
		{wrap(backend.ErrLeaseLost), 76},
		{wrap(backend.ErrPermission), 77},
		// The backend's state is unknown, not "held": never 75.
		{wrap(fmt.Errorf("%w: %w", backend.ErrNotAcquired, backend.ErrUnavailable)), 69},
		{wrap(fmt.Errorf("%w: %w", backend.ErrUnavailable, backend.ErrPermission)), 77},
		{errors.New("dial tcp: connection refused"), 69},
		// A signal cancelled the wait: interrupted, not unavailable.
		{wrap(fmt.Errorf("%w: no answer before the context ended: %w", backend.ErrUnavailable, context.Canceled)), 130},
		{wrap(fmt.Errorf("%w: %w", backend.ErrUnavailable, context.DeadlineExceeded)), 69},
	} {
		assert.Equal(t, c.want, exitCode(c.err), "%v", c.err)
	}
}

// Errors are printed with one prefix per line, however deeply the library
// wrapped them.
func TestErrorPrefixNotRepeated(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("fencelock: release %q: %w", "x", fmt.Errorf("fencelock: refresh: %w", backend.ErrLeaseLost))
	var b bytes.Buffer
	assert.Equal(t, exitLockLost, report(&b, "run", err))
	assert.Equal(t, "fencelock run: release \"x\": refresh: lease lost\n", b.String())

	b.Reset()
	report(&b, "status", errors.Join(fmt.Errorf("fencelock: a: %w", backend.ErrUnavailable), errors.New("fencelock: b")))
	assert.Equal(t, "fencelock status: a: backend unavailable\nfencelock status: b\n", b.String())

	for _, args := range [][]string{
		{"run", "--url", "nosuch://x", "--lock", "s", "--", "true"},
		{"status", "--url", "nosuch://x", "s"},
		{"bench", "--url", "nosuch://x"},
		{"demo", "--url", "nosuch://x"},
		{"run", "--url", "mem://", "--lock", "bad\x01name", "--", "true"},
		{"status", "--url", "mem://", ""},
	} {
		r := binary(t, args...)
		assert.Equal(t, exitInvalid, r.code, "%q: %+v", args, r)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		assert.Equal(t, 1, strings.Count(r.stderr, "fencelock"), "one prefix: %q", r.stderr)
		assert.True(t, strings.HasPrefix(r.stderr, "fencelock "+args[0]+": "), r.stderr)
	}
}

// A --max-hold (or max_hold=) that ends the hold is reported as such, with
// status 76.
func TestRunReportsMaxHold(t *testing.T) {
	t.Parallel() // long, and on servers of its own
	script := `trap 'exit 0' TERM; while :; do sleep 0.05; done`
	for _, c := range []struct {
		name string
		args []string
	}{
		{"flag", []string{"--url", "mem://maxhold-flag?ttl=3s", "--max-hold", "1s"}},
		{"url", []string{"--url", "mem://maxhold-url?ttl=3s&max_hold=1s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(c.args, "--lock", "m", "--grace", "300ms", "--", "sh", "-c", script)
			r := run1(t, args...)
			assert.Equal(t, exitLockLost, r.code, r.stderr)
			assert.Equal(t, "fencelock run: max hold of 1s reached: stopping the command\n", r.stderr)
		})
	}
	// Without a max hold, a lease that runs out says so differently.
	assert.Equal(t, exitOK, run1(t, "--url", "mem://maxhold-none?ttl=3s", "--lock", "m", "--", "true").code)
}

// go-redis logs failed dials to os.Stderr on its own; the command's
// stderr has only its one error line.
func TestRedisClientLogsSilenced(t *testing.T) {
	t.Parallel()
	port, err := freeport.Port() // nothing listens there
	require.NoError(t, err)
	url := "redis://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(port)) + "?dial_timeout=500ms"
	r := binary(t, "status", "--url", url, "--timeout", "5s", "x")
	assert.Equal(t, exitUnavailable, r.code, "%+v", r)
	assert.NotContains(t, r.stderr, "connection pool")
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	assert.True(t, strings.HasPrefix(r.stderr, "fencelock status: "), r.stderr)
}

// status --json: snake_case keys, seconds, tokens as strings, null holder
// and empty waiters for a free lock.
func TestStatusJSONSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := backend.Open(ctx, "mem://status-json?ttl=10s")
	require.NoError(t, err)
	defer l.Close()
	lease, err := l.Acquire(ctx, "job", backend.WithHolder("worker-a"), backend.WithMetadata(map[string]string{"pid": "42"}))
	require.NoError(t, err)

	r := cli("status", "--url", "mem://status-json", "--json", "job")
	require.Equal(t, exitOK, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.ElementsMatch(t, []string{"name", "holder", "waiters"}, keys(got))
	assert.Equal(t, "job", got["name"])
	assert.Equal(t, []any{}, got["waiters"])
	holder, ok := got["holder"].(map[string]any)
	require.True(t, ok, r.stdout)
	assert.ElementsMatch(t, []string{"id", "holder", "token", "ttl_left_seconds", "metadata", "value"}, keys(holder))
	assert.Equal(t, "worker-a", holder["holder"])
	assert.Equal(t, lease.Token().String(), holder["token"])
	assert.Equal(t, map[string]any{"pid": "42"}, holder["metadata"])
	ttl, ok := holder["ttl_left_seconds"].(float64)
	require.True(t, ok, "ttl_left_seconds must be a number: %s", r.stdout)
	assert.Greater(t, ttl, 0.0)
	assert.LessOrEqual(t, ttl, 10.0, "seconds, not nanoseconds or milliseconds")

	require.NoError(t, lease.Release(ctx))
	r = cli("status", "--url", "mem://status-json", "--json", "job")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.JSONEq(t, `{"name": "job", "holder": null, "waiters": []}`, r.stdout)
}

// bench --json: the same naming and units as status --json.
func TestBenchJSONSchema(t *testing.T) {
	t.Parallel()
	r := cli("bench", "--url", "mem://bench-json", "-n", "20", "-c", "2", "--waiters", "10", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.ElementsMatch(t, []string{"url", "round_trip_seconds", "uncontended", "contended", "queue"}, keys(got))
	q := got["queue"].(map[string]any)
	assert.ElementsMatch(t, []string{"waiters", "drain_seconds", "handoff_p50_seconds", "handoff_p99_seconds", "out_of_order"}, keys(q))
	un := got["uncontended"].(map[string]any)
	assert.ElementsMatch(t, []string{"ops", "elapsed_seconds", "mean_seconds", "p50_seconds", "p99_seconds"}, keys(un))
	co := got["contended"].(map[string]any)
	assert.ElementsMatch(t, []string{"contenders", "grants", "elapsed_seconds", "grants_per_second",
		"handoff_p50_seconds", "handoff_p99_seconds", "grants_per_contender"}, keys(co))
	for _, k := range []string{"mean_seconds", "p50_seconds", "p99_seconds", "elapsed_seconds"} {
		v := un[k].(float64)
		assert.Greater(t, v, 0.0, k)
		assert.Less(t, v, 60.0, "%s is in seconds", k)
	}

	// The URL's password is not printed, not even when the URL is refused
	// (mem:// takes no password; the adapters' own tests check the printed
	// URL of a networked backend).
	r = cli("bench", "--url", "mem://user:secret@bench-json", "-n", "5", "-c", "1", "--json")
	require.Equal(t, exitInvalid, r.code, r.stderr)
	assert.NotContains(t, r.stdout+r.stderr, "secret")
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// The progress bar is drawn only on a terminal.
func TestProgressOnlyOnTerminal(t *testing.T) {
	t.Parallel()
	assert.False(t, isTerminal(&bytes.Buffer{}))
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, isTerminal(f))
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	assert.False(t, isTerminal(null), "/dev/null is a character device but no terminal")
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	defer pw.Close()
	assert.False(t, isTerminal(pw))
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		assert.True(t, isTerminal(tty))
		tty.Close()
	}

	var b bytes.Buffer
	p := newProgress(&b, "x", 10, false)
	p.set(5)
	p.set(10)
	p.done()
	assert.Empty(t, b.String())
	p = newProgress(&b, "x", 10, true)
	p.set(10)
	p.done()
	assert.Equal(t, "\rx              [##############################] 10/10\n", b.String())

	// bench through a pipe, as in CI logs or | tee: no bar.
	r := binary(t, "bench", "--url", "mem://bench-pipe", "-n", "20", "-c", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	assert.NotContains(t, r.stdout, "\r")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/fencelock/fencelock", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T06:24:10Z"}, {Key: "vcs.modified", Value: "true"}}}
	text := versionText(bi, []string{"etcd", "zk"})
	assert.Regexp(t, `^fencelock v1\.2\.3\ngo: go1\.26\.0 \w+/\w+\nrevision: 0123abcd \(2026-12-01T06:24:10Z, modified\)\nschemes: etcd zk\n$`, text)
	bi.Settings = nil
	assert.NotContains(t, versionText(bi, nil), "revision")
	assert.Contains(t, versionText(nil, nil), "fencelock (unknown)\n")

	for _, arg := range []string{"version", "-version", "--version"} {
		r := binary(t, arg)
		assert.Equal(t, exitOK, r.code, "%s: %+v", arg, r)
		assert.Regexp(t, `^fencelock \S+\ngo: go1\.\S+ \w+/\w+\n(revision: [0-9a-f]+.*\n)?schemes: .*\bzk\b.*\n$`, r.stdout, arg)
		assert.Empty(t, r.stderr)
	}
}
