package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/freeport"
)

// scrape returns the text at http://addr/metrics, or "" if it cannot be had.
func scrape(addr string) string {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

// run --metrics-addr and elect --metrics-addr on every backend, each a real
// server on this machine: while the command runs, /metrics shows the
// grant's acquire duration with the backend attribute, and one lease held.
func TestMetricsAddrOnEveryBackend(t *testing.T) {
	t.Parallel() // long, and on servers of its own
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // a server of its own
			url := b.start(t)
			for _, command := range []string{"run", "elect"} {
				t.Run(command, func(t *testing.T) {
					port, err := freeport.Port()
					require.NoError(t, err)
					addr := fmt.Sprintf("127.0.0.1:%d", port)
					dir := t.TempDir()
					hold := `touch "$1/held"; while [ ! -e "$1/stop" ]; do sleep 0.05; done`
					nameFlag := map[string]string{"run": "--lock", "elect": "--name"}[command]
					p := startBinary(t, command, "--url", url("cli-metrics-"+command), nameFlag, "job", "--metrics-addr", addr,
						"--", "sh", "-c", hold, "sh", dir)
					require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "held")); return err == nil },
						60*time.Second, 50*time.Millisecond, "the command did not start")

					held := regexp.MustCompile(`(?m)^fencelock_leases_held\{[^}]*fencelock_backend="` + b.name + `"[^}]*\} 1$`)
					granted := regexp.MustCompile(`(?m)^fencelock_acquire_duration_seconds_count\{[^}]*fencelock_acquire_result="granted"[^}]*fencelock_backend="` + b.name + `"[^}]*\} 1$`)
					var text string
					require.Eventually(t, func() bool {
						text = scrape(addr)
						return held.MatchString(text) && granted.MatchString(text)
					}, 30*time.Second, 100*time.Millisecond, "metrics:\n%s", text)
					assert.Contains(t, text, "# TYPE fencelock_acquire_duration_seconds histogram")
					assert.Contains(t, text, `otel_scope_name="github.com/fencelock/fencelock"`)

					require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
					r := p.wait(t)
					assert.Equal(t, exitOK, r.code, "%+v", r)
					assert.Empty(t, r.stderr)
					assert.Empty(t, scrape(addr), "the server stops with fencelock")
				})
			}
		})
	}
}

// A bad --metrics-addr is a usage error before any dial (the URL's server
// is down: a dial would be 69), and so is one that cannot be listened on.
func TestMetricsAddrBadBeforeDial(t *testing.T) {
	t.Parallel()
	port, err := freeport.Port()
	require.NoError(t, err)
	down := fmt.Sprintf("etcd://127.0.0.1:%d/x?dial_timeout=1s", port)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	for _, addr := range []string{"nonsense", "127.0.0.1:http-ish", "127.0.0.1:70000", ln.Addr().String()} {
		for _, args := range [][]string{
			{"run", "--url", down, "--lock", "x", "--metrics-addr", addr, "--", "true"},
			{"elect", "--url", down, "--name", "x", "--metrics-addr", addr, "--", "true"},
		} {
			start := time.Now()
			r := cli(args...)
			assert.Equal(t, exitUsage, r.code, "%q: %+v", args, r)
			assert.Contains(t, r.stderr, "--metrics-addr", "%q", args)
			assert.Less(t, time.Since(start), time.Second, "no dial: %q", args)
		}
	}
}
