package etcd

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// TestOpenTLS opens etcds:// URLs against an embedded etcd that serves
// clients over TLS only and requires client certificates: the URL with the
// CA and the client pair works; one that lacks either, or that speaks plain
// etcd://, fails in Open, within dial_timeout, without hanging.
func TestOpenTLS(t *testing.T) {
	f := tlstest.New(t)
	s := etcdtest.Start(t, etcdtest.WithClientTLS(f))
	host := strings.TrimPrefix(s.Endpoints()[0], "https://")
	// 3s: a busy machine can take over 1s to finish a TLS handshake, and
	// the refusals must find the handshake's error within the dial
	// timeout (with 1s, one of them timed out with no reason under a
	// double test load).
	base := "etcds://" + host + "/" + testPrefix(t) + "?dial_timeout=3s"

	ctx := tctx(t, 20*time.Second)
	l, err := backend.Open(ctx, strings.Replace(base, "dial_timeout=3s", "dial_timeout=5s", 1)+"&"+f.Query())
	require.NoError(t, err)
	ls, err := l.TryAcquire(ctx, "n")
	require.NoError(t, err)
	release(t, ls)
	require.NoError(t, l.Close())

	locktest.Refused(t, 10*time.Second, []locktest.Refusal{
		// No cacert: the system roots do not know the test CA.
		{Name: "system roots", URL: base + "&cert=" + f.ClientCert + "&key=" + f.ClientKey, Want: "x509: certificate signed by unknown authority", Bound: 6 * time.Second},
		// The server requires a client certificate.
		{Name: "no client certificate", URL: base + "&cacert=" + f.CA, Want: "certificate required", Bound: 6 * time.Second},
		// Plain gRPC to a TLS port.
		{Name: "plain URL", URL: strings.Replace(base, "etcds://", "etcd://", 1), Want: "cannot reach", Bound: 6 * time.Second},
	}, locktest.OpenErr) // bounded by dial_timeout, not the context
}
