package main

import (
	"bytes"
	"context"
	"errors"
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
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/etcdtest"
)

// These tests run the real fencelock binary as child processes against a
// real (embedded) etcd server: $FENCELOCK_BIN if set (scripts/test builds
// it from this tree once, for these tests and the campaigns' workers),
// else one built here.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func fencelockBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("FENCELOCK_BIN"); bin != "" {
		return bin // scripts/test built it from this tree
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fencelock-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "fencelock")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

type runResult struct {
	code           int
	stdout, stderr string
}

// startRun starts fencelock run with args, the binary (see startGroup).
func startRun(t *testing.T, args ...string) *live {
	t.Helper()
	return startLive(t, true, append([]string{"run"}, args...)...)
}

// run1 runs fencelock run with args, the binary, to its end.
func run1(t *testing.T, args ...string) runResult {
	t.Helper()
	return startRun(t, args...).wait(t)
}

func etcdURL(s *etcdtest.Server, prefix string) string {
	return "etcd://" + strings.TrimPrefix(s.Endpoints()[0], "http://") + "/" + prefix + "?ttl=2s"
}

func TestRunNoWaitExactlyOneRuns(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	url := etcdURL(srv, "run-nowait")
	dir := t.TempDir()
	// The command holds until the other run has ended (or 30s have passed,
	// should both run): a hold of fixed length could end before a busy
	// machine has started the other run, which would then rightly run too.
	script := `echo "$FENCELOCK_LOCK $FENCELOCK_TOKEN" > "$1/ran-$2"
n=0; while [ ! -e "$1/stop" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done`
	var wg sync.WaitGroup
	results := make([]runResult, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = run1(t, "--url", url, "--lock", "cron", "--no-wait", "--", "sh", "-c", script, "sh", dir, strconv.Itoa(i))
			_ = os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
		}()
	}
	wg.Wait()
	codes := []int{results[0].code, results[1].code}
	assert.ElementsMatch(t, []int{0, exitNotAcquired}, codes, "%+v", results)
	ran, err := filepath.Glob(filepath.Join(dir, "ran-*"))
	require.NoError(t, err)
	require.Len(t, ran, 1, "exactly one command must run")
	content, err := os.ReadFile(ran[0])
	require.NoError(t, err)
	fields := strings.Fields(string(content))
	require.Len(t, fields, 2)
	assert.Equal(t, "cron", fields[0])
	_, err = fencing.ParseToken(fields[1])
	assert.NoError(t, err, "FENCELOCK_TOKEN must be a token")
}

func TestRunExitStatuses(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	url := etcdURL(srv, "run-status")
	assert.Equal(t, 7, run1(t, "--url", url, "--lock", "s", "--", "sh", "-c", "exit 7").code)
	assert.Equal(t, 128+int(syscall.SIGKILL), run1(t, "--url", url, "--lock", "s", "--", "sh", "-c", "kill -9 $$").code)
	r := run1(t, "--url", "nosuch://x", "--lock", "s", "--", "true")
	assert.Equal(t, exitInvalid, r.code)
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %q", r.stderr)
	assert.Equal(t, exitInvalid, run1(t, "--url", url, "--lock", "bad\x01name", "--", "true").code)
	assert.Equal(t, exitUsage, run1(t, "--url", url, "--", "true").code)
	assert.Equal(t, exitUsage, run1(t, "--url", url, "--lock", "s").code)
	assert.Equal(t, exitUnavailable, run1(t, "--url", "etcd://127.0.0.1:1/x?dial_timeout=1s", "--lock", "s", "--", "true").code)
}

func TestRunWaitTimeout(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	url := etcdURL(srv, "run-wait")
	dir := t.TempDir()
	// The holder holds until told: a fixed hold (and a fixed sleep for its
	// grant) could end before a busy machine has started the waiter.
	hold := `touch "$1/held"; while [ ! -e "$1/stop" ]; do sleep 0.05; done`
	holder := startRun(t, "--url", url, "--lock", "w", "--", "sh", "-c", hold, "sh", dir)
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "held")); return err == nil },
		60*time.Second, 50*time.Millisecond, "the holder did not start: %s", holder.errOut.String())
	r := run1(t, "--url", url, "--lock", "w", "--wait-timeout", "500ms", "--", "true")
	assert.Equal(t, exitNotAcquired, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
	assert.Equal(t, 0, holder.wait(t).code)
}

func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	url := etcdURL(srv, "run-signal")
	dir := t.TempDir()
	marker := filepath.Join(dir, "usr1")
	script := `trap 'echo got > "$1"; exit 0' USR1; touch "$1.ready"; while :; do sleep 0.1; done`
	p := startRun(t, "--url", url, "--lock", "sig", "--", "sh", "-c", script, "sh", marker)
	require.Eventually(t, func() bool { _, err := os.Stat(marker + ".ready"); return err == nil }, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGUSR1))
	r := p.wait(t)
	assert.Equal(t, 0, r.code, r.stderr)
	_, err := os.Stat(marker)
	assert.NoError(t, err, "the command did not get SIGUSR1")
}

// A lease that stops being renewed (--max-hold) ends the command before
// another holder's command starts.
func TestRunStopsCommandBeforeNextHolder(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	url := etcdURL(srv, "run-lost")
	dir := t.TempDir()
	first := `trap 'date +%s%N > "$1/first-end"; exit 0' TERM; touch "$1/first-start"; while :; do sleep 0.05; done`
	p1 := startRun(t, "--url", url, "--lock", "l", "--max-hold", "1s", "--grace", "500ms", "--", "sh", "-c", first, "sh", dir)
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "first-start")); return err == nil }, 30*time.Second, 50*time.Millisecond)
	second := `date +%s%N > "$1/second-start"`
	r2 := run1(t, "--url", url, "--lock", "l", "--", "sh", "-c", second, "sh", dir)
	r1 := p1.wait(t)
	assert.Equal(t, exitLockLost, r1.code, r1.stderr)
	assert.Contains(t, r1.stderr, "fencelock run: max hold of 1s reached: stopping the command")
	assert.Equal(t, 0, r2.code, r2.stderr)
	end := readNanos(t, filepath.Join(dir, "first-end"))
	start := readNanos(t, filepath.Join(dir, "second-start"))
	assert.Less(t, end, start, "the first command must be stopped before the second holder's command starts")
}

// A lease revoked on the server stops the command at once.
func TestRunStopsCommandWhenLeaseRevoked(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	url := etcdURL(srv, "run-revoke")
	dir := t.TempDir()
	script := `trap 'exit 0' TERM; touch "$1/start"; while :; do sleep 0.05; done`
	p := startRun(t, "--url", url, "--lock", "r", "--", "sh", "-c", script, "sh", dir)
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "start")); return err == nil }, 30*time.Second, 50*time.Millisecond)
	c := srv.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, "run-revoke/r/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	_, err = c.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)
	r := p.wait(t)
	assert.Equal(t, exitLockLost, r.code, r.stderr)
}

func readNanos(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	return n
}

func TestStatusShowsHolderAndWaiter(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	url := etcdURL(srv, "status")
	dir := t.TempDir()
	// The holder holds until told: a hold of fixed length could end before a
	// busy machine has started the waiter and queued it.
	hold := `touch "$1/held"; while [ ! -e "$1/stop" ]; do sleep 0.05; done`
	holder := startRun(t, "--url", url+"&holder=worker-a", "--lock", "job", "--", "sh", "-c", hold, "sh", dir)
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "held")); return err == nil }, 30*time.Second, 50*time.Millisecond)
	waiter := startRun(t, "--url", url+"&holder=worker-b", "--lock", "job", "--", "true")

	var out, errOut bytes.Buffer
	require.Eventually(t, func() bool {
		out.Reset()
		return run(context.Background(), []string{"status", "--url", url, "job"}, &out, &errOut) == 0 &&
			strings.Contains(out.String(), "1 waiting")
	}, 20*time.Second, 100*time.Millisecond, "stdout %q stderr %q", out.String(), errOut.String())
	assert.Contains(t, out.String(), `lock "job" held by worker-a, token `)
	assert.Contains(t, out.String(), "1. worker-b, token ")
	assert.Regexp(t, `held by worker-a, .*, id status/job/[0-9a-f]+@\d+\n`, out.String())
	assert.Regexp(t, `1\. worker-b, .*, id status/job/[0-9a-f]+@\d+\n`, out.String())

	require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
	assert.Equal(t, 0, holder.wait(t).code)
	assert.Equal(t, 0, waiter.wait(t).code)
	out.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"status", "--url", url, "--json", "job"}, &out, &errOut))
	assert.Contains(t, out.String(), `"holder": null`)
	assert.Equal(t, exitUsage, run(context.Background(), []string{"status", "--url", url}, &out, &errOut))
	assert.Equal(t, exitInvalid, run(context.Background(), []string{"status", "--url", url, ""}, &out, &errOut))
}

func TestConformanceCommand(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	url := "etcd://" + strings.TrimPrefix(srv.Endpoints()[0], "http://") + "/conformance-cli"
	cmd := exec.Command(fencelockBin(t), "conformance", "--run", "TryAcquire|IndependentNames", url)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Regexp(t, `TryAcquire\s+PASS`, out.String())
	assert.Regexp(t, `IndependentNames\s+PASS`, out.String())
	assert.Contains(t, out.String(), "2 passed, 0 failed")

	bad := exec.Command(fencelockBin(t), "conformance", "etcd://127.0.0.1/noport")
	assert.Error(t, bad.Run())
	assert.Equal(t, exitInvalid, bad.ProcessState.ExitCode())
}

func TestConformanceTableReportsFailures(t *testing.T) {
	t.Parallel()
	// As go test -v prints it: the result lines of the cases come together
	// once TestConformance has ended, after every case's output.
	child := strings.Join([]string{
		"=== RUN   TestConformance",
		"=== RUN   TestConformance/TryAcquire",
		"    suite.go:10: acquired",
		"=== RUN   TestConformance/WaiterCrash",
		"    suite.go:235: timed out: crashed waiter: no result within 6s",
		"=== RUN   TestConformance/Loss",
		"=== RUN   TestConformance/Loss/Revoked",
		"    loss.go:80: lease not lost",
		"=== NAME  TestConformance/Loss",
		"    loss.go:90: after the sub-case",
		"=== RUN   TestConformance/Close",
		"--- FAIL: TestConformance (8.60s)",
		"    --- PASS: TestConformance/TryAcquire (0.10s)",
		"    --- FAIL: TestConformance/WaiterCrash (6.00s)",
		"    --- FAIL: TestConformance/Loss (2.50s)",
		"        --- FAIL: TestConformance/Loss/Revoked (2.00s)",
		"    --- PASS: TestConformance/Close (0.01s)",
		"FAIL",
	}, "\n")
	var progress, table bytes.Buffer
	results := readResults(strings.NewReader(child), &progress, false)
	assert.Contains(t, progress.String(), "ok   TryAcquire")
	assert.Contains(t, progress.String(), "FAIL Loss")
	failed := printTable(&table, results, 3*time.Second)
	assert.Equal(t, 2, failed)
	tab := table.String()
	assert.Contains(t, tab, "  Loss/Revoked")
	assert.Contains(t, tab, "loss.go:80: lease not lost")
	assert.Contains(t, tab, "loss.go:90: after the sub-case")
	assert.Contains(t, tab, "timed out: crashed waiter", "the reason of a case that is not the first")
	assert.NotContains(t, tab, "acquired", "a passing case's output")
	assert.Less(t, strings.Index(tab, "crashed waiter"), strings.Index(tab, "Loss"), "each reason under its own case")
	assert.Contains(t, tab, "2 passed, 2 failed")
}

func TestConformanceCapsRoundTrip(t *testing.T) {
	t.Parallel()
	c := conformance.Capabilities{FIFO: true, TTL: 2 * time.Second, MinTTL: 400 * time.Millisecond, LockDelay: true}
	got, err := decodeCaps(encodeCaps(c))
	require.NoError(t, err)
	assert.Equal(t, c, got)
	got, err = decodeCaps(encodeCaps(conformance.Capabilities{}))
	require.NoError(t, err)
	assert.Equal(t, conformance.Capabilities{}, got)
	_, err = decodeCaps("true,2s")
	assert.Error(t, err)
}
