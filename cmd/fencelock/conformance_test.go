package main

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// conformanceRun runs the fencelock binary's conformance command and
// returns its exit status, output and how long it took.
func conformanceRun(t *testing.T, timeout time.Duration, args ...string) (code int, stdout, stderr string, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, fencelockBin(t), append([]string{"conformance"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := <-startGroup(t, cmd)
	took = time.Since(start)
	require.NoError(t, ctx.Err(), "fencelock conformance %v did not end within %v\nstdout:\n%s\nstderr:\n%s", args, timeout, out.String(), errOut.String())
	if err != nil {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String(), took
}

// TestConformanceCommandServers runs the whole suite through the command
// against local servers of each backend, with the settings each scheme
// declares, and against a ZooKeeper server with Debian's stock session
// timeout bounds (4s to 40s), where the settings are read from the server
// (the suite's 2s TTL and 60s long leases are not granted there). The runs
// mostly wait for TTLs, so they run at once.
func TestConformanceCommandServers(t *testing.T) {
	t.Parallel()    // long, and on servers of its own
	fencelockBin(t) // build once, before the parallel runs
	for _, tc := range []struct {
		name     string
		url      func(t *testing.T) string
		settings string
	}{
		{"etcd", func(t *testing.T) string {
			srv := etcdtest.Start(t)
			return "etcd://" + strings.TrimPrefix(srv.Endpoints()[0], "http://") + "/conformance-cli"
		}, "ttl 2s, min-ttl 2s, max-ttl 0s, fifo true"},
		{"redis", func(t *testing.T) string {
			return "redis://" + redistest.Start(t).Addr() + "/0?prefix=conformance-cli"
		}, "ttl 2s, min-ttl 100ms, max-ttl 0s, fifo true"},
		{"postgres", func(t *testing.T) string {
			return pgtest.Start(t).NewDatabase(t) + "&prefix=conformance_cli"
		}, "ttl 2s, min-ttl 100ms, max-ttl 0s, fifo true"},
		{"zookeeper", func(t *testing.T) string {
			return "zk://" + zktest.Start(t).Addr() + "/conformance-cli"
		}, "ttl 2s, min-ttl 400ms, max-ttl 2m0s, fifo true"},
		{"zookeeper-stock", func(t *testing.T) string {
			// Debian's stock server: its timeouts and its limit of 60
			// connections per client address (the suite's concurrent
			// cases all come from one).
			return "zk://" + zktest.Start(t, zktest.WithStockTimeouts(), zktest.WithConfig("maxClientCnxns", "60")).Addr() + "/conformance-cli"
		}, "ttl 4s, min-ttl 4s, max-ttl 40s, fifo true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{tc.url(t)}
			if testing.Short() {
				// The quick tier: the command's plumbing on every scheme;
				// the backends pass the whole suite in their packages.
				args = append(args, "--run", "^(TryAcquire|FIFO|Unavailable|ElectionResignHandsOver)$")
			}
			code, out, errOut, _ := conformanceRun(t, 20*time.Minute, args...)
			t.Log(out)
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			assert.Contains(t, out, "settings: "+tc.settings)
			assert.Regexp(t, `\n\d+ passed, 0 failed in`, out)
			assert.NotContains(t, out, "FAIL")
		})
	}
}

// TestConformanceCommandUnreachable: a URL nobody listens at fails in
// seconds with one line that names the host and the error, and exit
// status 69 (backend unavailable), before any case runs.
func TestConformanceCommandUnreachable(t *testing.T) {
	t.Parallel()
	port, err := freeport.Port()
	require.NoError(t, err)
	host := "127.0.0.1:" + strconv.Itoa(port)
	for _, url := range []string{"etcd://" + host + "/x", "zk://" + host + "/x", "redis://" + host + "/0", "postgres://u@" + host + "/x"} {
		t.Run(strings.Split(url, ":")[0], func(t *testing.T) {
			code, out, errOut, took := conformanceRun(t, time.Minute, url)
			assert.Equal(t, exitUnavailable, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			assert.Less(t, took, 15*time.Second, "an unreachable backend must be reported in seconds")
			assert.Empty(t, out, "nothing runs")
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			require.Len(t, lines, 1, "one line: %q", errOut)
			assert.Contains(t, lines[0], "backend unavailable")
			assert.Contains(t, lines[0], "dial tcp "+host)
		})
	}
}

// TestConformanceCommandFlags: -ttl, -min-ttl, -max-ttl and -fifo replace
// the scheme's declaration (-fifo=false too), and settings the suite cannot
// run with are refused before it starts.
func TestConformanceCommandFlags(t *testing.T) {
	t.Parallel()
	url := "redis://" + redistest.Start(t).Addr() + "/0?prefix=conformance-flags"
	code, out, errOut, _ := conformanceRun(t, 5*time.Minute, "-ttl", "3s", "-min-ttl", "1s", "-max-ttl", "1m", "-fifo=false", "--run", "^TryAcquire$", url)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "settings: ttl 3s, min-ttl 1s, max-ttl 1m0s, fifo false")
	assert.Contains(t, out, "1 passed, 0 failed")

	code, out, errOut, _ = conformanceRun(t, time.Minute, "-ttl", "1s", "-min-ttl", "2s", url)
	assert.Equal(t, exitInvalid, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, errOut, "TTL 1s is under MinTTL 2s")
	code, out, errOut, _ = conformanceRun(t, time.Minute, "-max-ttl", "5s", url)
	assert.Equal(t, exitInvalid, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, errOut, "MaxTTL 5s leaves no room")
	code, _, errOut, _ = conformanceRun(t, time.Minute, "-ttl", "x", url)
	assert.Equal(t, exitUsage, code, errOut)
}
