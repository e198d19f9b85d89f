package zookeeper

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/tlstest"
	"github.com/fencelock/fencelock/internal/urltest"
)

// TestOpenBadURLs: every bad zk or zks URL is refused with its reason,
// before any connection to the sentinel its hosts name, with no password
// in the error. Through backend.Open and this package's Open.
func TestOpenBadURLs(t *testing.T) {
	s := urltest.NewSentinel(t)
	h := s.Addr()
	pw := urltest.Secret
	f := tlstest.New(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	qe := url.QueryEscape
	cases := []urltest.Bad{
		{"zk:///x", "no host: want zk://host:port,host:port/prefix"},
		{"zk://" + h + ",,h2:2181/x", "empty host in the host list"},
		{"zk://h:0," + h + "/x", `host "h:0": port "0" is not a number from 1 to 65535`},
		{"zk://::1/x", "put IPv6 addresses in brackets"},
		{"zk://:2181/x", `host ":2181": empty host name`},
		{"zk://" + h + "/a//b", `prefix "/a//b" has an empty segment`},
		{"zk://" + h + "/a/../b", `has a ".." segment`},
		{"zk://" + h + "/zookeeper/x", "inside ZooKeeper's reserved /zookeeper tree"},
		{"zk://" + h + "/x?session_timeout=100ms", `session_timeout="100ms": under the ZooKeeper adapter's minimum of 400ms`},
		{"zk://" + h + "/x?session_timeout=400500us", `session_timeout="400500us": ZooKeeper session timeouts are whole milliseconds`},
		{"zk://" + h + "/x?session_timeout=soon", `session_timeout="soon" is not a duration`},
		{"zk://" + h + "/x?ttl=5s&session_timeout=6s", "ttl=5s and session_timeout=6s differ"},
		{"zk://" + h + "/x?ttl=100ms", `ttl="100ms": under the minimum TTL of zk URLs, 400ms`},
		{"zk://" + h + "/x?ttl=400500us", `ttl="400500us": ZooKeeper session timeouts are whole milliseconds`},
		{"zk://" + h + "/x?ttl=-1s", `ttl="-1s": the TTL must be positive`},
		{"zk://" + h + "/x?ttl=2s&drift=3s", `drift="3s": the drift margin must be smaller than the TTL (2s)`},
		// The TTL of a URL without ttl is its session_timeout, not
		// backend.DefaultTTL: drift is checked against it before any dial.
		{"zk://" + h + "/x?session_timeout=1s&drift=5s", `drift="5s": the drift margin must be smaller than the TTL (1s)`},
		{"zk://" + h + "/x?session_timeout=1s&drift=1s", `drift="1s": the drift margin must be smaller than the TTL (1s)`},
		{"zk://" + h + "/x?drift=15s", `drift="15s": the drift margin must be smaller than the TTL (15s)`},
		{"zk://" + h + "/x?dial_timeout=0s", `dial_timeout="0s": must be positive`},
		{"zk://" + h + "/x?dial_timeout=-1s", `dial_timeout="-1s": must be positive`},
		{"zk://" + h + "/x?dial_timeout=x", `dial_timeout="x" is not a duration`},
		{"zk://" + h + "/x?dial_timeout=1s&dial_timeout=1s", "query parameter dial_timeout given 2 times"},
		{"zk://" + h + "/x?chroot=/a", `unknown query parameter "chroot" for scheme zk`},
		{"zk://" + h + "/x?cacert=" + qe(f.CA), "use the zks:// scheme for TLS"},
		{"zks://" + h + "/x?cert=" + qe(f.ClientCert), "cert and key go together"},
		{"zks://" + h + "/x?cacert=" + qe(notPEM), "cacert: no PEM certificate"},
		{"zk://app@" + h + "/x", `user "app" has no password: digest credentials are zk://user:password@host`},
		{"zk://:" + pw + "@" + h + "/x", "zk://:xxxxx@" + h + "/x: empty user name"},
		{"zk://" + h + "/x#f", "a URL fragment (#...) is not allowed"},
		{"zk:" + h, "zk: URL without //"},
		{"zk://app:" + pw + "@" + h + ":x/x", "cannot parse the URL: invalid port after host"},
		{"zks://app:" + pw + "@" + h + "/x?cacert=" + qe(notPEM), "zks://app:xxxxx@" + h + "/x?cacert="},
		{"zk://app:" + pw + "@" + h + "/x?ttl=1s&ttl=1s", "given 2 times"},
	}
	urltest.RequireRefused(t, s, cases)

	// session_timeout alone is parsed before any dial too.
	for _, raw := range []string{"zk://app:" + pw + "@" + h + ":x/x?session_timeout=1s", "zk://app:" + pw + "@" + h + "/x?session_timeout=1s&session_timeout=2s", "zk://" + h + "/x?session_timeout=1s&dial_timeout=0s"} {
		_, err := backend.Open(context.Background(), raw)
		require.ErrorIs(t, err, backend.ErrInvalidURL, raw)
		urltest.NoLeak(t, err, pw)
	}
	assert.Zero(t, s.Accepted(), "no connection to the sentinel")

	// CheckURL finds what Open finds.
	for _, c := range cases {
		assert.ErrorIs(t, backend.CheckURL(c[0]), backend.ErrInvalidURL, c[0])
	}
}

// Open returns at its context's deadline (it overshot by go-zookeeper's
// one-second Close), and dial_timeout bounds it without one (it waited
// forever), for a closed port and a server that accepts and never
// answers, TLS or not.
func TestOpenBounded(t *testing.T) {
	silent := urltest.NewSentinel(t).Addr()
	closed := urltest.ClosedPort(t)
	for _, raw := range []string{"zk://" + silent, "zks://" + silent, "zk://" + closed, "zk://u:p@" + silent} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := urltest.OpenFails(t, ctx, raw+"/x", time.Second+500*time.Millisecond)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded, raw)
		err = urltest.OpenFails(t, context.Background(), raw+"/x?dial_timeout=1s", 3*time.Second)
		assert.ErrorIs(t, err, backend.ErrUnavailable, raw)
		assert.ErrorContains(t, err, "no session within dial_timeout 1s", raw)
		if strings.Contains(raw, silent) && !strings.HasPrefix(raw, "zks") {
			assert.ErrorContains(t, err, "accepted the connection but did not answer the session request")
		}
		if strings.Contains(raw, closed) {
			assert.ErrorContains(t, err, "connection refused")
		}
	}
	// A host name that does not resolve is unavailable too, as on the
	// other schemes (the resolver answers at once here: .invalid is never
	// a name).
	err := urltest.OpenFails(t, context.Background(), "zk://nosuchhost.invalid:2181/x?dial_timeout=1s", 3*time.Second)
	assert.ErrorIs(t, err, backend.ErrUnavailable)
}

// zks:// at the plain test server says TLS, well within dial_timeout (at
// the first failed handshake). (zk:// at a TLS port: TestOpenTLS.)
func TestOpenTLSAtPlainPort(t *testing.T) {
	err := urltest.OpenFails(t, context.Background(), "zks://"+srv.Addr()+"/x?dial_timeout=5s", 3*time.Second)
	assert.ErrorContains(t, err, "every server failed TLS: TLS handshake with "+srv.Addr())
	assert.ErrorContains(t, err, "is it a plain port? use zk://")
}

// The default dial timeout is documented as 10s at most.
func TestDefaultDialTimeout(t *testing.T) {
	assert.LessOrEqual(t, DefaultDialTimeout, 10*time.Second)
	cfg, err := parseURL(&url.URL{Scheme: "zk", Host: "h"})
	require.NoError(t, err)
	assert.Equal(t, DefaultDialTimeout, cfg.DialTimeout)
}
