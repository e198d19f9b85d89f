package etcd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/etcdtest"
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
	base := "etcds://" + host + "/" + testPrefix(t) + "?dial_timeout=1s"

	ctx := tctx(t, 20*time.Second)
	l, err := backend.Open(ctx, base+"&"+f.Query())
	require.NoError(t, err)
	ls, err := l.TryAcquire(ctx, "n")
	require.NoError(t, err)
	release(t, ls)
	require.NoError(t, l.Close())

	for _, tc := range []struct {
		name, url, want string
	}{
		// No cacert: the system roots do not know the test CA.
		{"system roots", base + "&cert=" + f.ClientCert + "&key=" + f.ClientKey, "x509: certificate signed by unknown authority"},
		// The server requires a client certificate.
		{"no client certificate", base + "&cacert=" + f.CA, "certificate required"},
		// Plain gRPC to a TLS port.
		{"plain URL", strings.Replace(base, "etcds://", "etcd://", 1), "cannot reach"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			l, err := backend.Open(ctx, tc.url)
			if err == nil {
				_ = l.Close()
			}
			t.Logf("after %v: %v", time.Since(start), err)
			require.Error(t, err)
			assert.NotErrorIs(t, err, backend.ErrInvalidURL)
			assert.Contains(t, err.Error(), tc.want)
			assert.Less(t, time.Since(start), 5*time.Second, "bounded by dial_timeout, not the context")
		})
	}
}
