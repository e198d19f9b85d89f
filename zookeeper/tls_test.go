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
	"github.com/fencelock/fencelock/internal/tlstest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// TestOpenTLS opens zks:// URLs against a ZooKeeper server that serves
// clients over TLS only and requires client certificates: the URL with the
// CA and the client pair works; one that lacks either fails in Open with
// the TLS error, well before the context's deadline (go-zookeeper itself
// would retry forever); plain zk:// to the TLS port gets no session and
// fails at the context's deadline.
func TestOpenTLS(t *testing.T) {
	f := tlstest.New(t)
	s := zktest.Start(t, zktest.WithTLS(f))
	base := "zks://" + s.Addr() + testPrefix(t) + "?ttl=2s"
	clientPair := "&cert=" + url.QueryEscape(f.ClientCert) + "&key=" + url.QueryEscape(f.ClientKey)

	ctx := tctx(t, 20*time.Second)
	start := time.Now()
	l, err := Open(ctx, base+"&"+f.Query())
	require.NoError(t, err)
	t.Logf("opened in %v", time.Since(start))
	ls, err := l.TryAcquire(ctx, "n")
	require.NoError(t, err)
	require.NoError(t, ls.Release(ctx))
	require.NoError(t, l.Close())

	for _, tc := range []struct {
		name, url, want string
		bound           time.Duration
	}{
		// No cacert: the system roots do not know the test CA.
		{"system roots", base + clientPair, "x509: certificate signed by unknown authority", 3 * time.Second},
		// ssl.clientAuth=need.
		{"no client certificate", base + "&cacert=" + url.QueryEscape(f.CA), "remote error: tls: ", 3 * time.Second},
		// Plain ZooKeeper to a TLS port: the server drops the connection,
		// which is no TLS error, so only the context bounds it.
		{"plain URL", strings.Replace(base, "zks://", "zk://", 1), "context deadline exceeded", 6 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
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
			assert.Less(t, time.Since(start), tc.bound)
		})
	}

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
