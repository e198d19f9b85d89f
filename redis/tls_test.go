package redis

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// TestOpenTLS opens rediss:// URLs against a redis-server that serves TLS
// only and requires client certificates: the URL with the CA and the
// client pair works, and so does skip_verify; one that lacks either, or
// that speaks plain redis://, fails at the first operation (Open does not
// dial), within the bound, without hanging.
func TestOpenTLS(t *testing.T) {
	f := tlstest.New(t)
	s := redistest.Start(t, redistest.WithTLS(f))
	base := "rediss://" + s.Addr() + "/0?prefix=" + url.QueryEscape(testPrefix(t)) + "&dial_timeout=1s"
	clientPair := "&cert=" + url.QueryEscape(f.ClientCert) + "&key=" + url.QueryEscape(f.ClientKey)

	for _, raw := range []string{
		base + "&" + f.Query(),
		base + "&skip_verify=true" + clientPair, // no CA, no verification
	} {
		ctx := tctx(t, 20*time.Second)
		l, err := backend.Open(ctx, raw)
		require.NoError(t, err, raw)
		ls, err := l.TryAcquire(ctx, "n")
		require.NoError(t, err, raw)
		release(t, ls)
		require.NoError(t, l.Close())
	}

	for _, tc := range []struct {
		name, url, want string
	}{
		// No cacert: the system roots do not know the test CA.
		{"system roots", base + clientPair, "x509: certificate signed by unknown authority"},
		// tls-auth-clients yes.
		{"no client certificate", base + "&cacert=" + url.QueryEscape(f.CA), "certificate required"},
		// Plain RESP to a TLS port.
		{"plain URL", strings.Replace(base, "rediss://", "redis://", 1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			l, err := backend.Open(ctx, tc.url)
			require.NoError(t, err, "Open does not dial")
			defer l.Close()
			_, err = l.TryAcquire(ctx, "n")
			t.Logf("after %v: %v", time.Since(start), err)
			require.Error(t, err)
			assert.NotErrorIs(t, err, backend.ErrNotAcquired)
			assert.Contains(t, err.Error(), tc.want)
			assert.Less(t, time.Since(start), 5*time.Second, "bounded by dial_timeout, not the context")
		})
	}
}
