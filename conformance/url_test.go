package conformance_test

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/conformance/servers"
	_ "github.com/fencelock/fencelock/etcd"
	_ "github.com/fencelock/fencelock/redis"
	_ "github.com/fencelock/fencelock/zookeeper"
)

var urlFlag = flag.String("fencelock.url", "", "run TestURL against this backend URL only (default $FENCELOCK_URL, else the servers of $FENCELOCK_PROVIDER)")

// zkCaps are the suite's settings for ZooKeeper: the servers of package
// servers have a tickTime of 200ms and allow sessions of 400ms to 120s. An
// external ensemble ($FENCELOCK_ZK_URL) needs bounds as wide (tickTime at
// most 200ms, maxSessionTimeout at least 30s); for others, use
// -fencelock.url with the fencelock conformance command's -ttl and -min-ttl.
var zkCaps = conformance.Capabilities{FIFO: true, TTL: 2 * time.Second, MinTTL: 400 * time.Millisecond}

// TestURL runs the suite against a backend URL: -fencelock.url or
// $FENCELOCK_URL (your own cluster) alone, or else, for each provider in
// $FENCELOCK_PROVIDER (comma-separated, default auto) and each of etcd,
// ZooKeeper and Redis, against a single server and, where the provider is
// Docker (or auto picks it), a cluster: TestURL/<provider>/<kind>/<topology>,
// e.g. -run 'TestURL/docker/etcd/cluster'. The external provider runs the
// kinds whose $FENCELOCK_<KIND>_URL is set. Nothing is skipped: a provider
// that cannot start a server fails its subtest.
//
// The runs mostly wait for TTLs to pass (measured: 9 runs, 35s of CPU in
// 4 minutes), so up to twice -parallel of them (4 on 2 cores) run at once.
func TestURL(t *testing.T) {
	u := *urlFlag
	if u == "" {
		u = os.Getenv("FENCELOCK_URL")
	}
	if u != "" {
		runURL(t, u, conformance.Capabilities{})
		return
	}
	providers, err := servers.ProvidersFromEnv()
	require.NoError(t, err)
	sem := make(chan struct{}, 2*urlParallel())
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
						caps := conformance.Capabilities{} // URLCapabilities of the scheme
						if kind == servers.ZooKeeper {
							caps = zkCaps
						}
						runURL(t, s.URL, caps)
					})
				}()
			}
		}
		if ran == 0 {
			t.Errorf("provider %s: no server to run against (set FENCELOCK_ETCD_URL, FENCELOCK_ZK_URL or FENCELOCK_REDIS_URL)", p)
		}
	}
	wg.Wait()
}

// urlParallel returns the -test.parallel setting (GOMAXPROCS by default).
func urlParallel() int {
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n > 0 {
			return n
		}
	}
	return runtime.GOMAXPROCS(0)
}

// urlTopologies returns the topologies TestURL runs kind in with provider
// p: single, and cluster too with Docker.
func urlTopologies(t *testing.T, p servers.Provider, kind servers.Kind) []servers.Topology {
	switch p {
	case servers.External:
		if os.Getenv(servers.URLEnv[kind]) == "" {
			t.Logf("provider external: $%s unset, no %s run", servers.URLEnv[kind], kind)
			return nil
		}
		return []servers.Topology{servers.Single}
	case servers.Docker:
		return []servers.Topology{servers.Single, servers.Cluster}
	case servers.Auto:
		if got, err := servers.Resolve(p, kind, servers.Cluster); err == nil && got == servers.Docker {
			return []servers.Topology{servers.Single, servers.Cluster}
		}
	}
	return []servers.Topology{servers.Single}
}

func runURL(t *testing.T, u string, caps conformance.Capabilities) {
	t.Logf("backend: %s", u)
	h, err := conformance.NewURLHarness(u, caps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	conformance.Run(t, h)
}
