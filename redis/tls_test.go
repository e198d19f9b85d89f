package redis

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// TestOpenTLS opens rediss:// URLs against a redis-server that serves TLS
// only and requires client certificates: the URL with the CA and the
// client pair works, and so does skip_verify; one that lacks either, or
// that speaks plain redis://, fails in Open (which pings), within
// dial_timeout, with an error that says TLS.
func TestOpenTLS(t *testing.T) {
	f := tlstest.New(t)
	s := redistest.Start(t, redistest.WithTLS(f))
	base := "rediss://" + s.Addr() + "/0?prefix=" + url.QueryEscape(testPrefix(t)) + "&dial_timeout=3s"
	clientPair := "&cert=" + url.QueryEscape(f.ClientCert) + "&key=" + url.QueryEscape(f.ClientKey)

	// The working URLs dial with 5s, the refusals with 3s: a busy machine
	// can take over 1s to finish a TLS dial, or to reach the step that
	// refuses it (seen: the system roots' refusal cut by a 1s dial_timeout
	// in a full run).
	working := strings.Replace(base, "dial_timeout=3s", "dial_timeout=5s", 1)
	for _, raw := range []string{
		working + "&" + f.Query(),
		working + "&skip_verify=true" + clientPair, // no CA, no verification
	} {
		ctx := tctx(t, 20*time.Second)
		l, err := backend.Open(ctx, raw)
		require.NoError(t, err, raw)
		ls, err := l.TryAcquire(ctx, "n")
		require.NoError(t, err, raw)
		release(t, ls)
		require.NoError(t, l.Close())
	}

	locktest.Refused(t, 10*time.Second, []locktest.Refusal{
		// No cacert: the system roots do not know the test CA.
		{Name: "system roots", URL: base + clientPair, Want: "x509: certificate signed by unknown authority", Bound: 6 * time.Second},
		// tls-auth-clients yes.
		{Name: "no client certificate", URL: base + "&cacert=" + url.QueryEscape(f.CA), Want: "certificate required", Bound: 6 * time.Second},
		// Plain RESP to a TLS port.
		{Name: "plain URL", URL: strings.Replace(base, "rediss://", "redis://", 1), Want: "speaks TLS: use the rediss:// scheme", Bound: 6 * time.Second},
	}, locktest.OpenErr) // Open pings: bounded by dial_timeout, not the context
}
