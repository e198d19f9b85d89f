package conformance_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/conformance"
	_ "github.com/fencelock/fencelock/etcd"
	"github.com/fencelock/fencelock/internal/etcdtest"
)

var urlFlag = flag.String("fencelock.url", "", "run TestURL against this backend URL (default $FENCELOCK_URL, else an embedded etcd)")

// TestURL runs the suite against a backend URL: -fencelock.url or
// $FENCELOCK_URL (your own cluster), or else an embedded etcd server, so it
// never skips.
func TestURL(t *testing.T) {
	u := *urlFlag
	if u == "" {
		u = os.Getenv("FENCELOCK_URL")
	}
	if u == "" {
		srv := etcdtest.Start(t)
		u = "etcd://" + strings.TrimPrefix(srv.Endpoints()[0], "http://") + "/fencelock-conformance-url"
	}
	t.Logf("backend: %s", u)
	h, err := conformance.NewURLHarness(u, conformance.Capabilities{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	conformance.Run(t, h)
}
