package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/tlstest"
	"github.com/fencelock/fencelock/internal/urltest"
)

// TestOpenBadURLs: every bad postgres or postgresql URL is refused with its
// reason, before any connection to the sentinel it names, with no
// password in the error.
func TestOpenBadURLs(t *testing.T) {
	s := urltest.NewSentinel(t)
	h := s.Addr()
	pw := urltest.Secret
	f := tlstest.New(t)
	urltest.RequireRefused(t, s, []urltest.Bad{
		{"postgres://" + h + "/db?prefix=", "prefix is empty"},
		{"postgres://" + h + "/db?prefix=Locks", `prefix="Locks": not a lower-case SQL identifier`},
		{"postgres://" + h + "/db?prefix=a-b", `prefix="a-b": not a lower-case SQL identifier`},
		{"postgres://" + h + "/db?prefix=a&prefix=b", "query parameter prefix given 2 times"},
		{"postgres://" + h + "/db?migrate=maybe", `migrate="maybe" is not true or false`},
		{"postgres://" + h + "/db?listen=maybe", `listen="maybe" is not true or false`},
		{"postgres://" + h + "/db?listen=false&listen_host=h:5432", "listen_host with listen=false"},
		{"postgres://" + h + "/db?listen_host=::1", "put IPv6 addresses in brackets"},
		{"postgres://" + h + "/db?listen_host=h:0", `port "0" is not a number from 1 to 65535`},
		{"postgres://" + h + "/db?sslmode=sometimes", "sslmode is invalid"},
		{"postgres://" + h + "/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "/nonexistent/ca.pem"},
		{"postgres://" + h + "/db?sslmode=verify-full&sslrootcert=" + f.ClientKey, "unable to add CA to cert pool"},
		{"postgres://" + h + "/db?sslcert=" + f.ClientCert, `both "sslcert" and "sslkey" are required`},
		{"postgres://" + h + "/db?connect_timeout=soon", `connect_timeout="soon" is not a whole number of seconds such as 5`},
		{"postgres://" + h + "/db?connect_timeout=5s", `connect_timeout="5s" is not a whole number of seconds`},
		// 0 is no timeout to pgx and libpq: refused, as dial_timeout=0 is
		// on the other schemes (it became 5s without a word).
		{"postgres://" + h + "/db?connect_timeout=0", `connect_timeout="0": must be positive: 0 means no timeout to pgx and libpq`},
		{"postgres://" + h + "/db?connect_timeout=-1", `connect_timeout="-1": must be positive`},
		{"postgres://" + h + "/db?connect_timeout=99999999999", `connect_timeout="99999999999": more than 24h0m0s`},
		{"postgres://" + h + "/db?connect_timeout=99999999999999999999", `connect_timeout="99999999999999999999": more than 24h0m0s`},
		{"postgres://" + h + "/db?pool_max_conns=0", "pool_max_conns too small"},
		{"postgres://" + h + "/db?pool_max_conns=many", "pool_max_conns"},
		{"postgres://" + h + "/db?pool_max_conn_lifetime=x", "pool_max_conn_lifetime"},
		{"postgres://" + h + "/db?statement_timeout=1s", `unknown query parameter "statement_timeout" for scheme postgres`},
		{"postgres://" + h + "/db?bogus=1", `unknown query parameter "bogus" for scheme postgres`},
		{"postgresql://" + h + "/db?bogus=1", `unknown query parameter "bogus" for scheme postgresql`},
		{"postgres://" + h + "/db?ttl=100500us", `ttl="100500us": postgres expiries are whole milliseconds`},
		{"postgres://" + h + "/db?ttl=50ms", `ttl="50ms": under the minimum TTL of postgres URLs, 100ms`},
		{"postgres://" + h + "/db?ttl=0s", `ttl="0s": the TTL must be positive`},
		{"postgres://u@" + h + "/db#x", "a URL fragment (#...) is not allowed"},
		{"postgres://u:" + pw + "@[::1/db", "cannot parse the URL: missing ']' in host"},
		{"postgres://u:" + pw + "@" + h + "/db?sslmode=sometimes", "postgres://u:xxxxx@" + h + "/db"},
		{"postgres://u:" + pw + "@" + h + "/db?pool_max_conns=0", "pool_max_conns"},
		{"postgres:" + pw + "@" + h, "postgres: URL without //"},
	})
}

// Open pings within connect_timeout and returns at its context's deadline
// from a server that accepts and never answers; a closed port fails at
// once.
func TestOpenBounded(t *testing.T) {
	silent := urltest.NewSentinel(t).Addr()
	closed := urltest.ClosedPort(t)
	for _, hp := range []string{silent, closed} {
		raw := "postgres://u:" + urltest.Secret + "@" + hp + "/db?sslmode=disable"
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := urltest.OpenFails(t, ctx, raw+"&connect_timeout=5", time.Second+500*time.Millisecond)
		cancel()
		assert.ErrorIs(t, err, backend.ErrUnavailable, hp)
		if hp == silent {
			assert.ErrorIs(t, err, context.DeadlineExceeded, hp)
			// The error names the bound it had: the context's 1s, not 5s.
			assert.ErrorContains(t, err, "the context's deadline (before connect_timeout 5s)", hp)
		}
		urltest.NoLeak(t, err, urltest.Secret)
		err = urltest.OpenFails(t, context.Background(), raw+"&connect_timeout=1", 3*time.Second)
		assert.ErrorIs(t, err, backend.ErrUnavailable, hp)
		assert.ErrorContains(t, err, "cannot reach the server (connect_timeout 1s)", hp)
		assert.NotContains(t, err.Error(), "\n", "one line, though pgx lists each attempt on a line of its own")
		urltest.NoLeak(t, err, urltest.Secret)
	}
}
