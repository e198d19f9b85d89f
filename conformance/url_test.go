package conformance_test

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/conformance"
	_ "github.com/fencelock/fencelock/etcd"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/zktest"
	_ "github.com/fencelock/fencelock/redis"
	_ "github.com/fencelock/fencelock/zookeeper"
)

var urlFlag = flag.String("fencelock.url", "", "run TestURL against this backend URL (default $FENCELOCK_URL, else an embedded etcd)")

// TestURL runs the suite against a backend URL: -fencelock.url or
// $FENCELOCK_URL (your own cluster), or else against servers of its own (an
// embedded etcd, a redis-server), so it never skips.
func TestURL(t *testing.T) {
	u := *urlFlag
	if u == "" {
		u = os.Getenv("FENCELOCK_URL")
	}
	if u != "" {
		runURL(t, u, conformance.Capabilities{})
		return
	}
	t.Run("etcd", func(t *testing.T) {
		srv := etcdtest.Start(t)
		runURL(t, "etcd://"+strings.TrimPrefix(srv.Endpoints()[0], "http://")+"/fencelock-conformance-url", conformance.Capabilities{})
	})
	t.Run("redis", func(t *testing.T) {
		runURL(t, "redis://"+redistest.Start(t).Addr()+"/0?prefix=fencelock-conformance-url", conformance.Capabilities{})
	})
	t.Run("zookeeper", func(t *testing.T) {
		// zktest's tickTime (200ms) allows sessions of 400ms to 120s.
		caps := conformance.Capabilities{FIFO: true, TTL: 2 * time.Second, MinTTL: 400 * time.Millisecond}
		runURL(t, "zk://"+zktest.Start(t).Addr()+"/fencelock-conformance-url", caps)
	})
}

func runURL(t *testing.T, u string, caps conformance.Capabilities) {
	t.Logf("backend: %s", u)
	h, err := conformance.NewURLHarness(u, caps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	conformance.Run(t, h.Harness())
}
