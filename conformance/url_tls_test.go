package conformance_test

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/tlstest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// TestURLTLS runs the suite through etcds://, rediss:// and zks:// URLs
// that name a private CA and a client certificate (cacert, cert, key),
// against local servers that serve TLS only and require client
// certificates: an embedded etcd, Debian's redis-server (alone, and with a
// replica that replicates over TLS, every write waiting for it:
// wait_replicas=1) and Debian's ZooKeeper. The harness's proxies pass TLS
// through on
// 127.0.0.1, which the server certificate names. It never skips: a server
// that cannot start fails it.
func TestURLTLS(t *testing.T) {
	skipForUserURL(t)
	f := tlstest.New(t)
	t.Run("etcds", func(t *testing.T) {
		t.Parallel()
		s := etcdtest.Start(t, etcdtest.WithClientTLS(f))
		host := strings.TrimPrefix(s.Endpoints()[0], "https://")
		runURL(t, "etcds://"+host+"/fencelock-tls?"+f.Query(), nil)
	})
	t.Run("rediss", func(t *testing.T) {
		t.Parallel()
		s := redistest.Start(t, redistest.WithTLS(f))
		runURL(t, "rediss://"+s.Addr()+"/0?prefix=fencelock-tls&"+f.Query(), nil)
	})
	t.Run("rediss_replicated", func(t *testing.T) {
		t.Parallel()
		s := redistest.Start(t, redistest.WithTLS(f))
		redistest.StartReplica(t, s, redistest.WithTLS(f))
		runURL(t, "rediss://"+s.Addr()+"/0?prefix=fencelock-tls&wait_replicas=1&"+f.Query(), nil)
	})
	t.Run("zks", func(t *testing.T) {
		t.Parallel()
		s := zktest.Start(t, zktest.WithTLS(f))
		runURL(t, "zks://"+s.Addr()+"/fencelock-tls?"+f.Query(), nil)
	})
}
