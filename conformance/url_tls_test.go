package conformance_test

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// TestURLTLS runs the suite through etcds:// and rediss:// URLs that name a
// private CA and a client certificate (cacert, cert, key), against local
// servers that serve TLS only and require client certificates: an embedded
// etcd and Debian's redis-server. The harness's proxies pass TLS through on
// 127.0.0.1, which the server certificate names. It never skips: a server
// that cannot start fails it.
func TestURLTLS(t *testing.T) {
	f := tlstest.New(t)
	t.Run("etcds", func(t *testing.T) {
		t.Parallel()
		s := etcdtest.Start(t, etcdtest.WithClientTLS(f))
		host := strings.TrimPrefix(s.Endpoints()[0], "https://")
		runURL(t, "etcds://"+host+"/fencelock-tls?"+f.Query(), conformance.Capabilities{})
	})
	t.Run("rediss", func(t *testing.T) {
		t.Parallel()
		s := redistest.Start(t, redistest.WithTLS(f))
		runURL(t, "rediss://"+s.Addr()+"/0?prefix=fencelock-tls&"+f.Query(), conformance.Capabilities{})
	})
}
