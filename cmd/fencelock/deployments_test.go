package main

import (
	"context"
	"encoding/json"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance/chaos"
	"github.com/fencelock/fencelock/conformance/servers"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/freeport"
)

// deployment is a backend deployed as in production, named by one URL
// whose client finds its servers: a Redis primary, its replica and three
// Sentinels (redis+sentinel://), a Redis Cluster of three masters with a
// replica each (redis+cluster://), a PostgreSQL primary and its
// asynchronous standby (postgres://h:p1,h:p2/…?target_session_attrs=read-write).
type deployment struct {
	name string
	kind servers.Kind // the backend, as its metrics name it
	topo servers.Topology
}

var deployments = []deployment{
	{"redis-sentinel", servers.Redis, servers.Sentinel},
	{"redis-cluster", servers.Redis, servers.Sharded},
	{"postgres-standby", servers.Postgres, servers.Cluster},
}

// deploymentURL returns a function that gives srv's URL with a prefix of
// its own (an SQL identifier too: no '-') and, if ttl is set, that TTL.
func deploymentURL(t *testing.T, srv *servers.Server) func(prefix string, ttl time.Duration) string {
	return func(prefix string, ttl time.Duration) string {
		u, err := neturl.Parse(srv.URL)
		require.NoError(t, err)
		q := u.Query()
		q.Set("prefix", prefix)
		if ttl > 0 {
			q.Set("ttl", ttl.String())
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
}

// Every subcommand on each deployment, once, on its main path, with short
// options: what the deployment's URL changes (its parsing, the discovery
// of the servers, a client that follows the primary, the suite's and the
// campaign's proxies in front of every server) and nothing that the tests
// on single servers already cover (TestSubcommandsOnEveryBackend,
// TestElectLeaderOnEveryBackend, TestConformanceCommandServers ...). Each
// deployment is started once, and its subcommands share it; the long ones
// (chaos, conformance, demo) run as processes beside the others. Then the
// deployment fails over, and the same URL reaches the new primary; last,
// its servers are paused: an outage is "unavailable" (69), never "held"
// (75). The full run only: 2 to 6 servers each.
func TestSubcommandsOnDeployments(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the quick tier runs single servers (TestSubcommandsOnEveryBackend); the full run runs the deployments")
	}
	t.Parallel() // long, and on servers of its own
	fencelockBin(t)
	for _, d := range deployments {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel() // servers of its own
			srv := servers.StartWith(t, servers.Local, d.kind, d.topo)
			url := deploymentURL(t, srv)

			// The long ones, as processes, beside the rest.
			chaosOut := t.TempDir()
			chaosRun := startLive(t, true, "chaos", "--url", url("cli_chaos", 0), "--faults", string(chaos.Partition),
				"--workers", "2", "--duration", "4s", "--out", chaosOut)
			suite := startLive(t, true, "conformance", "--run", "^(TryAcquire|Unavailable)$", url("cli_conformance", 0))
			demo := startLive(t, true, "demo", "--url", url("cli_demo", 0), "--ttl", "2s")

			t.Run("run-status-metrics", func(t *testing.T) { testRunOnDeployment(t, d, url("cli_run", 6*time.Second)) })
			t.Run("elect-leader", func(t *testing.T) { testElectOnDeployment(t, url("cli_elect", 6*time.Second)) })
			t.Run("advise", func(t *testing.T) { testAdviseOnDeployment(t, url("cli_advise", 6*time.Second)) })
			t.Run("bench", func(t *testing.T) {
				r := cli("bench", "--url", url("cli_bench", 6*time.Second), "-n", "10", "-c", "2", "--waiters", "5", "--json")
				require.Equal(t, exitOK, r.code, "%+v", r)
				var rep benchJSON
				require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
				assert.Equal(t, 10, rep.Uncontended.Ops)
				assert.GreaterOrEqual(t, rep.Contended.Grants, 10)
				require.NotNil(t, rep.Queue)
				assert.Zero(t, rep.Queue.OutOfOrder, "grants out of queue order")
			})
			t.Run("chaos", func(t *testing.T) {
				r := chaosRun.wait(t)
				require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
				t.Logf("fencelock chaos:\n%s", r.stdout)
				assert.Contains(t, r.stdout, "no violation")
				b, err := os.ReadFile(filepath.Join(chaosOut, "summary.json"))
				require.NoError(t, err)
				var sum chaos.Summary
				require.NoError(t, json.Unmarshal(b, &sum))
				assert.Positive(t, sum.Grants, "fenced grants")
				// The partition cuts a worker off every server its client
				// found: proxies in front of each.
				assert.GreaterOrEqual(t, sum.Faults[chaos.Partition], 1, "partitions: %s", r.stdout)
			})
			t.Run("conformance", func(t *testing.T) {
				r := suite.wait(t)
				require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
				assert.Regexp(t, `TryAcquire\s+PASS`, r.stdout)
				assert.Regexp(t, `Unavailable\s+PASS`, r.stdout)
				assert.Contains(t, r.stdout, "2 passed, 0 failed")
			})
			t.Run("demo", func(t *testing.T) {
				r := demo.wait(t)
				require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
				assert.Contains(t, r.stdout, "OK: A's stale write")
			})
			// After the campaign and the suite, which a failover would
			// disturb; last, the outage, which pauses every server.
			t.Run("failover", func(t *testing.T) { testFailoverOnDeployment(t, srv, url("cli_failover", 6*time.Second)) })
			t.Run("outage", func(t *testing.T) { testOutageOnDeployment(t, srv, url("cli_outage", 6*time.Second)) })
		})
	}
}

// testRunOnDeployment: run holds the lock, with the token in its command's
// environment; status, another client, finds that holder on the
// deployment; run --no-wait meanwhile exits 75; --metrics-addr names the
// backend by its kind; the next grant's token is greater.
func testRunOnDeployment(t *testing.T, d deployment, url string) {
	dir := t.TempDir()
	port, err := freeport.Port()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	hold := `echo "$FENCELOCK_TOKEN" > "$1/token.tmp"; mv "$1/token.tmp" "$1/token"; while [ ! -e "$1/stop" ]; do sleep 0.05; done`
	holder := startRun(t, "--url", url, "--lock", "job", "--metrics-addr", addr, "--", "sh", "-c", hold, "sh", dir)
	first := parseToken(t, waitFile(t, filepath.Join(dir, "token"), &holder.proc))

	r := cli("status", "--url", url, "--json", "job")
	require.Equal(t, exitOK, r.code, "%+v", r)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.NotNil(t, st.Holder, r.stdout)
	assert.Equal(t, first.String(), st.Holder.Token)

	r = run1(t, "--url", url, "--lock", "job", "--no-wait", "--", "touch", filepath.Join(dir, "ran"))
	assert.Equal(t, exitNotAcquired, r.code, "%+v", r)
	assert.NoFileExists(t, filepath.Join(dir, "ran"))

	held := regexp.MustCompile(`(?m)^fencelock_leases_held\{[^}]*fencelock_backend="` + string(d.kind) + `"[^}]*\} 1$`)
	var text string
	require.Eventually(t, func() bool { text = scrape(addr); return held.MatchString(text) },
		30*time.Second, 100*time.Millisecond, "metrics:\n%s", text)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
	r = holder.wait(t)
	require.Equal(t, exitOK, r.code, "%+v", r)
	r = run1(t, "--url", url, "--lock", "job", "--", "sh", "-c", `echo "$FENCELOCK_TOKEN"`)
	require.Equal(t, exitOK, r.code, "%+v", r)
	assert.Greater(t, parseToken(t, r.stdout), first, "the next grant's token")
}

// testElectOnDeployment: elect leads and runs its command with the term;
// leader shows that leader; the command's end resigns, and leader shows
// no leader.
func testElectOnDeployment(t *testing.T, url string) {
	dir := t.TempDir()
	script := `echo "$FENCELOCK_TOKEN" > "$1/tok.tmp"; mv "$1/tok.tmp" "$1/tok"; while [ ! -e "$1/stop" ]; do sleep 0.05; done`
	p := startBinary(t, "elect", "--url", url, "--name", "job", "--value", "node A", "--", "sh", "-c", script, "sh", dir)
	term := parseToken(t, waitFile(t, filepath.Join(dir, "tok"), p))

	r := cli("leader", "--url", url, "--json", "job")
	require.Equal(t, exitOK, r.code, "%+v", r)
	var got leaderJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.NotNil(t, got.Leader, r.stdout)
	assert.Equal(t, "node A", got.Leader.Value)
	assert.Equal(t, term.String(), got.Leader.Token)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
	r = p.wait(t)
	require.Equal(t, exitOK, r.code, "%+v", r)
	r = cli("leader", "--url", url, "job")
	assert.Equal(t, runResult{exitOK, "election \"job\": no leader\n", ""}, r)
}

// testAdviseOnDeployment: advise sees the holds a worker makes, 100 to
// 300ms each, and advises a TTL above the longest.
func testAdviseOnDeployment(t *testing.T, url string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	worker, err := backend.Open(ctx, url)
	require.NoError(t, err)
	defer worker.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			l, err := worker.Acquire(ctx, "advised")
			if err != nil {
				return
			}
			time.Sleep(time.Duration(100*(1+i%3)) * time.Millisecond)
			_ = l.Release(context.WithoutCancel(ctx))
			time.Sleep(50 * time.Millisecond)
		}
	}()
	r := cli("advise", "--url", url, "--duration", "3s", "--interval", "20ms", "--min-holds", "2", "--json", "advised")
	require.Equal(t, exitOK, r.code, "%+v", r)
	var a adviseJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &a), r.stdout)
	assert.GreaterOrEqual(t, a.Holds, uint64(2), r.stdout)
	require.NotNil(t, a.TTLSeconds, r.stdout)
	assert.Greater(t, *a.TTLSeconds, a.MaxSeconds, r.stdout)
}

// testFailoverOnDeployment: after the deployment's failover (Sentinel: a
// replica promoted by the Sentinels; Cluster: CLUSTER FAILOVER TAKEOVER on
// the replica of slot 0's master; PostgreSQL: the primary killed, the
// standby promoted), the same URL reaches the new primary: run is granted
// the lock at once, with a greater token (the clock floor).
func testFailoverOnDeployment(t *testing.T, srv *servers.Server, url string) {
	token := func() fencing.Token {
		t.Helper()
		r := run1(t, "--url", url, "--lock", "job", "--", "sh", "-c", `echo "$FENCELOCK_TOKEN"`)
		require.Equal(t, exitOK, r.code, "%+v", r)
		return parseToken(t, r.stdout)
	}
	before := token()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old, err := srv.Primary(ctx)
	require.NoError(t, err)
	primary, err := srv.Failover(ctx)
	require.NoError(t, err)
	require.NotEqual(t, old.Name, primary.Name, "a new primary")
	assert.Greater(t, token(), before, "the token after the failover")
}

// testOutageOnDeployment pauses every server of srv (SIGSTOP: connections
// are accepted, nothing answers): run --no-wait, status and leader exit
// 69, never 75 (a job that skips when the lock is held must not skip
// silently when the backend is down), each with one line. The servers are
// continued at the end.
func testOutageOnDeployment(t *testing.T, srv *servers.Server, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, m := range srv.Members {
		if m.Role == "failed" {
			continue // the PostgreSQL primary killed by the failover
		}
		require.NoError(t, m.Pause(ctx), m.Name)
		defer func() { assert.NoError(t, m.Unpause(context.WithoutCancel(ctx)), m.Name) }()
	}
	procs := map[string]*live{
		"run":    startRun(t, "--url", url, "--lock", "job", "--no-wait", "--connect-timeout", "3s", "--", "true"),
		"status": startLive(t, true, "status", "--url", url, "--timeout", "3s", "job"),
		"leader": startLive(t, true, "leader", "--url", url, "--timeout", "3s", "job"),
	}
	for name, p := range procs {
		r := p.wait(t)
		assert.Equal(t, exitUnavailable, r.code, "%s: %+v", name, r)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%s: one line: %q", name, r.stderr)
	}
}
