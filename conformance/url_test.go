package conformance_test

import (
	"context"
	"flag"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/conformance/servers"
	_ "github.com/fencelock/fencelock/etcd"
	"github.com/fencelock/fencelock/internal/urlkit"
	_ "github.com/fencelock/fencelock/postgres"
	_ "github.com/fencelock/fencelock/redis"
	_ "github.com/fencelock/fencelock/zookeeper"
)

var (
	urlFlag = flag.String("fencelock.url", "", "run TestURL against this backend URL only (default $FENCELOCK_URL)")
	// capFlags are -fencelock.ttl, -fencelock.min-ttl, -fencelock.max-ttl
	// and -fencelock.fifo, for a URL of the user's.
	capFlags = conformance.CapabilityFlags(flag.CommandLine, "fencelock.")
)

// userURL returns -fencelock.url, or else $FENCELOCK_URL.
func userURL() string {
	if *urlFlag != "" {
		return *urlFlag
	}
	return os.Getenv("FENCELOCK_URL")
}

// skipForUserURL skips a test that starts its own servers when the run is
// about the user's URL (TestURL runs it), so that go test ./conformance
// -fencelock.url URL runs that URL only.
func skipForUserURL(t *testing.T) {
	if userURL() != "" {
		t.Skip("a backend URL is given (-fencelock.url or $FENCELOCK_URL): TestURL runs it, and this test, which starts its own servers, does not run")
	}
}

// TestURL runs the suite through the URL harness against servers it starts:
// for each provider in $FENCELOCK_PROVIDER (comma-separated, default auto)
// and each of etcd, ZooKeeper, Redis and PostgreSQL, against a single server
// and, where the provider is Docker (or auto picks it), a cluster (for
// PostgreSQL a primary and its streaming standby, locally too), and, in
// the full run (not -short), a Redis Sentinel deployment and a Redis
// Cluster (servers.Sentinel, servers.Sharded) with the local and Docker
// providers, and a PostgreSQL primary with a synchronous standby
// (servers.SyncStandby) with the local provider:
// TestURL/<provider>/<kind>/<topology>, e.g. -run
// 'TestURL/docker/etcd/cluster'. The external provider runs the kinds whose
// $FENCELOCK_<KIND>_URL is set. Nothing is skipped: a provider that cannot
// start a server fails its subtest.
//
// With a URL of your own (-fencelock.url or $FENCELOCK_URL) it runs that
// URL alone, as TestURL/user, with the capabilities its scheme declares
// (read from the server for ZooKeeper), each of which -fencelock.ttl,
// -fencelock.min-ttl, -fencelock.max-ttl and -fencelock.fifo override. An
// unreachable backend fails it in seconds, with one error.
//
// Two runs go at once (suitesAtOnce), each running its cases
// concurrently: more would load a two-core machine past the suite's time
// bounds (seen: four runs at once, with a campaign beside them, at a load
// average over 20).
func TestURL(t *testing.T) {
	if u := userURL(); u != "" {
		t.Run("user", func(t *testing.T) { runURL(t, u, capFlags) })
		return
	}
	providers, err := servers.ProvidersFromEnv()
	require.NoError(t, err)
	sem := make(chan struct{}, suitesAtOnce)
	var wg sync.WaitGroup
	for _, p := range providers {
		ran := 0
		for _, kind := range servers.Kinds {
			for _, topo := range urlTopologies(t, p, kind) {
				ran++
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					// t.Run from several goroutines at once: each run is a
					// subtest that -run can pick, without t.Parallel's limit.
					t.Run(string(p)+"/"+string(kind)+"/"+string(topo), func(t *testing.T) {
						s := servers.StartWith(t, p, kind, topo)
						runURL(t, s.URL, dockerTTL(p, kind))
					})
				}()
			}
		}
		if ran == 0 {
			t.Errorf("provider %s: no server to run against (set FENCELOCK_ETCD_URL, FENCELOCK_ZK_URL, FENCELOCK_REDIS_URL or FENCELOCK_POSTGRES_URL)", p)
		}
	}
	wg.Wait()
}

// dockerTTL returns, for the ZooKeeper and PostgreSQL servers of the
// Docker provider, an adjustment of the suite's TTL: 3s for ZooKeeper and
// 4s for PostgreSQL (from 2s). On a loaded two-core machine a starved
// container (the JVM's session ticks; a PostgreSQL backend's answer, which
// also crosses Docker's userland proxy, another starved process) missed
// 2s leases now and then, and PostgreSQL's missed 3s ones too (three cases
// of one scripts/test --under-load run, .ci/flaky.txt of f292d7e), which
// the suite then reports correctly as a lost lease (ErrDeadline) where
// the case waits for another outcome; the local servers and the other
// kinds keep their declared TTL.
func dockerTTL(p servers.Provider, kind servers.Kind) func(*conformance.Capabilities) {
	ttl := map[servers.Kind]time.Duration{servers.ZooKeeper: 3 * time.Second, servers.Postgres: 4 * time.Second}[kind]
	if p != servers.Docker || ttl == 0 {
		return nil
	}
	return func(c *conformance.Capabilities) { c.TTL = max(c.TTL, ttl) }
}

// suitesAtOnce is how many runs of the suite TestURL runs at once.
const suitesAtOnce = 2

// urlTopologies returns the topologies TestURL runs kind in with provider
// p: single, and cluster too with Docker, and for PostgreSQL (a primary
// and its asynchronous standby) with the local provider too, and in the
// full run its synchronous standby (sync) with local; Redis's sentinel and
// sharded topologies in the full run, locally and with Docker (with
// -race at a load of 10 to 18, the Docker ones' suites take 35-38s and
// 20-23s, so about 30s more of TestURL with two suites at once: measured,
// 244s -> 283s and 307s -> 267s, within the runs' noise).
func urlTopologies(t *testing.T, p servers.Provider, kind servers.Kind) []servers.Topology {
	switch {
	case p == servers.External:
		if os.Getenv(servers.URLEnv[kind]) == "" {
			t.Logf("provider external: $%s unset, no %s run", servers.URLEnv[kind], kind)
			return nil
		}
		return []servers.Topology{servers.Single}
	case p == servers.Docker && kind == servers.Redis && !testing.Short():
		// -short has no Docker provider (scripts/test quick runs local
		// servers only); a -short run given one leaves them out.
		return []servers.Topology{servers.Single, servers.Cluster, servers.Sentinel, servers.Sharded}
	case p == servers.Docker:
		return []servers.Topology{servers.Single, servers.Cluster}
	case kind == servers.Postgres:
		topos := []servers.Topology{servers.Single, servers.Cluster}
		if !testing.Short() {
			// The synchronous standby: the full run's, locally (the
			// Docker provider's pair is the asynchronous one).
			topos = append(topos, servers.SyncStandby)
		}
		return topos
	case p == servers.Local && kind == servers.Redis && !testing.Short():
		// The quick tier leaves them to the full run: eleven more
		// servers and two more suites on two cores (the redis package's
		// own tests open both topologies by URL).
		return []servers.Topology{servers.Single, servers.Sentinel, servers.Sharded}
	case p == servers.Auto:
		topos := []servers.Topology{servers.Single}
		if got, err := servers.Resolve(p, kind, servers.Cluster); err == nil && got == servers.Docker {
			topos = append(topos, servers.Cluster)
		}
		if kind == servers.Redis && !testing.Short() {
			topos = append(topos, servers.Sentinel, servers.Sharded)
		}
		return topos
	}
	return []servers.Topology{servers.Single}
}

// runURL runs the suite against u with the capabilities its scheme
// declares, passed through adjust if not nil, with the suite's options
// opts.
func runURL(t *testing.T, u string, adjust func(*conformance.Capabilities), opts ...conformance.RunOption) {
	if pu, err := url.Parse(u); err == nil {
		t.Logf("backend: %s", urlkit.Redact(pu)) // a user's URL may hold a password
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	caps, err := conformance.URLCapabilities(ctx, u)
	cancel()
	require.NoError(t, err)
	if adjust != nil {
		adjust(&caps)
	}
	t.Logf("capabilities: %+v", caps)
	h, err := conformance.NewURLHarness(u, caps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	conformance.Run(t, h, opts...)
}

// CheckURL refuses, without dialling, what the URL harness cannot run
// against, and never echoes a password.
func TestCheckURLBeforeDial(t *testing.T) {
	require.NoError(t, conformance.CheckURL("etcd://127.0.0.1:2379,127.0.0.1:2380/x"))
	for _, raw := range []string{
		"etcd://10.255.255.1/x",               // no port
		"etcd://10.255.255.1:2379,h/x",        // one host without a port
		"postgres://app:s3cret@/db?host=/tmp", // the host in the query
		"mem://",                              // in-process
		"etcd://app:s3cret@host:notaport/x",   // does not parse
		"etcd://127.0.0.1:2379/x?bogus=1",     // backend.CheckURL's
		"nosuch://127.0.0.1:1/x",              // unknown scheme
	} {
		err := conformance.CheckURL(raw)
		require.ErrorIs(t, err, backend.ErrInvalidURL, raw)
		require.NotContains(t, err.Error(), "s3cret", raw)
	}
}
