package conformance_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"

	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/tlstest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// TestURLTLS runs the suite through etcds://, rediss:// and zks:// URLs
// that name a private CA and a client certificate (cacert, cert, key), and
// postgres:// URLs that do the same with sslmode=verify-full, sslrootcert,
// sslcert and sslkey, against local servers that serve TLS only and
// require client certificates: an embedded etcd, Debian's redis-server
// (alone, and with a replica that replicates over TLS, every write waiting
// for it: wait_replicas=1), Debian's ZooKeeper and PostgreSQL (the client
// certificate is the login: pg_hba.conf's cert method). The harness's
// proxies pass TLS through on 127.0.0.1, which the server certificate
// names, so verify-full's check of the host name holds through them.
// TestURLTLS/postgres/refused checks that a wrong CA, a missing or foreign
// client certificate, no TLS or a host the certificate does not name fails
// Open. It never skips: a server that cannot start fails it. The suites
// run at a 3s TTL (tlsTTL); with -short (the quick tier), the cases of
// tlsShortCases only.
func TestURLTLS(t *testing.T) {
	skipForUserURL(t)
	f := tlstest.New(t)
	t.Run("etcds", func(t *testing.T) {
		t.Parallel()
		s := etcdtest.Start(t, etcdtest.WithClientTLS(f))
		host := strings.TrimPrefix(s.Endpoints()[0], "https://")
		runURL(t, "etcds://"+host+"/fencelock-tls?"+f.Query(), tlsTTL, tlsCases())
	})
	t.Run("rediss", func(t *testing.T) {
		t.Parallel()
		s := redistest.Start(t, redistest.WithTLS(f))
		runURL(t, "rediss://"+s.Addr()+"/0?prefix=fencelock-tls&"+f.Query(), tlsTTL, tlsCases())
	})
	t.Run("rediss_replicated", func(t *testing.T) {
		t.Parallel()
		s := redistest.Start(t, redistest.WithTLS(f))
		redistest.StartReplica(t, s, redistest.WithTLS(f))
		runURL(t, "rediss://"+s.Addr()+"/0?prefix=fencelock-tls&wait_replicas=1&"+f.Query(), tlsTTL, tlsCases())
	})
	t.Run("zks", func(t *testing.T) {
		t.Parallel()
		s := zktest.Start(t, zktest.WithTLS(f))
		runURL(t, "zks://"+s.Addr()+"/fencelock-tls?"+f.Query(), tlsTTL, tlsCases())
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		c := pgtest.Start(t, pgtest.WithTLS(f))
		dsn := c.NewDatabase(t) // sslmode=verify-full&sslrootcert=..&sslcert=..&sslkey=..
		t.Run("refused", func(t *testing.T) { pgTLSRefused(t, dsn) })
		runURL(t, dsn+"&prefix=fencelock_tls", tlsTTL, tlsCases())
	})
}

// pgTLSRefused opens URLs that differ from dsn, a verify-full URL of a
// pgtest.WithTLS cluster, by one TLS setting or by the address the server
// is reached at: each fails Open at once
// (the server refuses, or the handshake fails), never as held. A failed
// handshake is ErrUnavailable, as on the other TLS schemes; the server's
// refusal of a connection that lacks TLS or a client certificate is
// ErrPermission (SQLSTATE 28000).
func pgTLSRefused(t *testing.T, dsn string) {
	other := tlstest.New(t) // another CA, and a client certificate it signed
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	edit := func(set url.Values, del ...string) string {
		q := u.Query()
		for k, v := range set {
			q[k] = v
		}
		for _, k := range del {
			q.Del(k)
		}
		e := *u
		e.RawQuery = q.Encode()
		return e.String()
	}
	cases := []struct {
		locktest.Refusal
		kind error
	}{
		{locktest.Refusal{Name: "wrong CA", URL: edit(url.Values{"sslrootcert": {other.CA}}),
			Want: "TLS handshake failed (check sslrootcert, sslcert, sslkey"}, backend.ErrUnavailable},
		{locktest.Refusal{Name: "no client certificate", URL: edit(nil, "sslcert", "sslkey"),
			Want: "connection requires a valid client certificate"}, backend.ErrPermission},
		// Mostly "remote error: tls: unknown certificate authority", the
		// server's alert; but the server closes the connection after it,
		// and when the startup message pgx writes meanwhile draws a reset,
		// the alert is lost: "connection reset by peer" (2 in 60 runs).
		{locktest.Refusal{Name: "other CA's client certificate", URL: edit(url.Values{"sslcert": {other.ClientCert}, "sslkey": {other.ClientKey}})},
			backend.ErrUnavailable},
		{locktest.Refusal{Name: "no TLS", URL: edit(url.Values{"sslmode": {"disable"}}),
			Want: "no encryption"}, backend.ErrPermission},
		// The same server through an address its certificate does not
		// name: verify-full checks the host the URL names, which is why
		// the harness's proxies must listen on 127.0.0.1.
		{locktest.Refusal{Name: "host not in the certificate", URL: strings.Replace(dsn, u.Host, forward(t, u.Host), 1),
			Want: "not 127.0.0.2"}, backend.ErrUnavailable},
	}
	refusals := make([]locktest.Refusal, len(cases))
	kinds := make(map[string]error)
	for i, c := range cases {
		c.Bound = 3 * time.Second // connect_timeout is 5s: nothing waits for it
		refusals[i] = c.Refusal
		kinds[c.URL] = c.kind
	}
	locktest.Refused(t, 20*time.Second, refusals, func(t *testing.T, ctx context.Context, rawURL string) error {
		err := locktest.OpenErr(t, ctx, rawURL)
		assert.ErrorIs(t, err, kinds[rawURL])
		return err
	})
}

// forward listens on 127.0.0.2, a loopback address the tlstest server
// certificate does not name, and forwards each connection to target, until
// t ends.
func forward(t *testing.T, target string) string {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	return ln.Addr().String()
}

// tlsTTL raises the TLS suites' TTL to 3s (from 2s), as dockerTTL does for
// the starved containers: five TLS suites at once, each handshake and
// record costing CPU, lost 2s leases now and then in .ci/run and the quick
// tier at a load average of 10 to 13 (TestURLTLS/etcds/AutoRenew/Holder:
// the renewal in flight unanswered for a whole TTL; .ci/flaky.txt).
func tlsTTL(c *conformance.Capabilities) { c.TTL = max(c.TTL, 3*time.Second) }

// tlsShortCases are the cases TestURLTLS runs with -short (the quick
// tier): what a connection carries (grants, queues and their wake-ups,
// renewals, fencing, election values) and what a cut one does (through
// the harness's TLS-passing proxies). The whole suite runs over TLS in the
// full run; the quick tier runs it over plain connections (TestURL/local
// and each adapter's package), and all of it at once over TLS on five
// servers was the longest part of the quick tier.
var tlsShortCases = []string{"MutualExclusion", "FIFO", "TryAcquire", "AutoRenew", "StaleHolderFenced",
	"ElectionProclaim", "WaiterRevoked", "Errors", "Unavailable", "LossWhilePartitioned"}

// tlsCases returns the suite's option for TestURLTLS: all cases, or with
// -short those of tlsShortCases.
func tlsCases() conformance.RunOption {
	if testing.Short() {
		return conformance.OnlyCases(tlsShortCases...)
	}
	return conformance.OnlyCases()
}
