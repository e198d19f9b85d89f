package zookeeper

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/tlstest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// TestOpenTLS opens zks:// URLs against a ZooKeeper server that serves
// clients over TLS only and requires client certificates: the URL with the
// CA and the client pair works; one that lacks either fails in Open with
// the TLS error, well before the context's deadline (go-zookeeper itself
// would retry forever); plain zk:// to the TLS port fails as fast, saying
// the server speaks TLS.
func TestOpenTLS(t *testing.T) {
	f := tlstest.New(t)
	s := zktest.Start(t, zktest.WithTLS(f))
	base := "zks://" + s.Addr() + testPrefix(t) + "?ttl=2s"
	clientPair := "&cert=" + url.QueryEscape(f.ClientCert) + "&key=" + url.QueryEscape(f.ClientKey)

	ctx := tctx(t, 20*time.Second)
	start := time.Now()
	l, err := backend.Open(ctx, base+"&"+f.Query())
	require.NoError(t, err)
	t.Logf("opened in %v", time.Since(start))
	ls, err := l.TryAcquire(ctx, "n")
	require.NoError(t, err)
	require.NoError(t, ls.Release(ctx))
	require.NoError(t, l.Close())

	locktest.Refused(t, 4*time.Second, []locktest.Refusal{
		// No cacert: the system roots do not know the test CA.
		{Name: "system roots", URL: base + clientPair, Want: "x509: certificate signed by unknown authority", Bound: 3 * time.Second},
		// ssl.clientAuth=need.
		{Name: "no client certificate", URL: base + "&cacert=" + url.QueryEscape(f.CA), Want: "remote error: tls: ", Bound: 3 * time.Second},
		// Plain ZooKeeper to a TLS port: the server drops the connection
		// without a word; a probe finds it speaks TLS.
		{Name: "plain URL", URL: strings.Replace(base, "zks://", "zk://", 1), Want: "speaks TLS: use the zks:// scheme", Bound: 3 * time.Second},
	}, locktest.OpenErr)

	// Without a context deadline, a TLS failure still ends Open.
	t.Run("no deadline", func(t *testing.T) {
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			l, err := backend.Open(context.Background(), base+clientPair)
			if err == nil {
				_ = l.Close()
				err = errors.New("opened")
			}
			done <- err
		}()
		select {
		case err := <-done:
			t.Logf("after %v: %v", time.Since(start), err)
			assert.ErrorContains(t, err, "unknown authority")
		case <-time.After(10 * time.Second):
			t.Fatal("Open without a deadline still waits after 10s")
		}
	})

	// The TLS parameters belong to zks://.
	_, err = backend.Open(ctx, "zk://"+s.Addr()+"/x?"+f.Query())
	require.ErrorIs(t, err, backend.ErrInvalidURL)
}
