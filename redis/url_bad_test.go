package redis

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/tlstest"
	"github.com/fencelock/fencelock/internal/urltest"
)

// TestOpenBadURLs: every bad redis or rediss URL is refused with its
// reason, before any connection to the sentinel it names, with no
// password in the error.
func TestOpenBadURLs(t *testing.T) {
	s := urltest.NewSentinel(t)
	h := s.Addr()
	pw := urltest.Secret
	f := tlstest.New(t)
	qe := url.QueryEscape
	urltest.RequireRefused(t, s, []urltest.Bad{
		{"redis://", "no host: want redis://host:port/db"},
		{"redis://" + h + ",h2:6379", "one host only"},
		{"redis://h:0", `host "h:0": port "0" is not a number from 1 to 65535`},
		{"redis://h:99999", `port "99999" is not a number from 1 to 65535`},
		{"redis://::1", `put IPv6 addresses in brackets`},
		{"redis://" + h + "/notadb", `path "/notadb" is not a database number such as /0`},
		{"redis://" + h + "/0/1", `path "/0/1" is not a database number`},
		{"redis://" + h + "/-1", `path "/-1" is not a database number`},
		// SELECT takes a non-negative int32 at most.
		{"redis://" + h + "/99999999999", `path "/99999999999" is not a database number such as /0 (0 to 2147483647)`},
		{"redis://" + h + "/2147483648", `path "/2147483648" is not a database number`},
		{"redis://" + h + "/+1", `path "/+1" is not a database number`},
		{"redis://" + h + "?prefix=", "prefix is empty"},
		{"redis://" + h + "?prefix=a%7Bb", `prefix "a{b" must not contain '{' or '}'`},
		{"redis://" + h + "?prefix=a&prefix=b", "query parameter prefix given 2 times"},
		{"redis://" + h + "?clock_floor=maybe", `clock_floor="maybe" is not true or false`},
		{"redis://" + h + "?wait_replicas=-1", `wait_replicas="-1": must not be negative`},
		{"redis://" + h + "?wait_replicas=x", `wait_replicas="x" is not a number of replicas`},
		{"redis://" + h + "?wait_replicas=1&wait_timeout=0s", `wait_timeout="0s": must be at least 1ms (WAIT 0 blocks forever)`},
		{"redis://" + h + "?wait_replicas=1&wait_timeout=soon", `wait_timeout="soon" is not a duration`},
		{"redis://" + h + "?wait_timeout=1s", "wait_timeout without wait_replicas"},
		{"redis://" + h + "?foreign_interval=0s", `foreign_interval="0s": must be whole milliseconds, at least 1ms, or off`},
		{"redis://" + h + "?foreign_interval=1500us", `foreign_interval="1500us": must be whole milliseconds`},
		{"redis://" + h + "?foreign_interval=never", `foreign_interval="never" is not a duration`},
		{"redis://" + h + "?foreign_gap=0s", `foreign_gap="0s": must be whole milliseconds, at least 1ms`},
		{"redis://" + h + "?foreign_gap=1500us", `foreign_gap="1500us": must be whole milliseconds`},
		{"redis://" + h + "?foreign_gap=soon", `foreign_gap="soon" is not a duration`},
		{"redis://" + h + "?mixed_fleet=maybe", `mixed_fleet="maybe" is not true or false`},
		{"redis://" + h + "?dial_timeout=x", `dial_timeout="x" is not a duration such as 5s`},
		{"redis://" + h + "?dial_timeout=-1s", `dial_timeout="-1s": must be positive`},
		{"redis://" + h + "?dial_timeout=0", `dial_timeout="0": must be positive`},
		{"redis://" + h + "?read_timeout=-1", `read_timeout="-1": must be positive`},
		{"redis://" + h + "?pool_timeout=0s", `pool_timeout="0s": must be positive`},
		{"redis://" + h + "?pool_size=0", `pool_size="0": must be at least 1`},
		{"redis://" + h + "?pool_size=many", `pool_size="many" is not an integer`},
		{"redis://" + h + "?max_retries=-2", `max_retries="-2": must be at least -1`},
		{"redis://" + h + "?min_idle_conns=-1", `min_idle_conns="-1": must be at least 0`},
		{"redis://" + h + "?protocol=4", `protocol="4": the RESP protocol version is 2 or 3`},
		{"redis://" + h + "?pool_fifo=yes", `pool_fifo="yes" is not true or false`},
		{"redis://" + h + "?client_name=", `client_name="": a client name is not empty and has only printable ASCII characters, no spaces`},
		// Redis refuses CLIENT SETNAME with a space, a control character
		// or anything outside printable ASCII: refused before the dial.
		{"redis://" + h + "?client_name=a%09b", `client_name="a\tb": a client name is not empty and has only printable ASCII`},
		{"redis://" + h + "?client_name=a%20b", `client_name="a b": a client name`},
		{"redis://" + h + "?client_name=a%7Fb", `client_name="a\x7fb": a client name`},
		{"redis://" + h + "?client_name=%C3%A9t%C3%A9", `client_name="été": a client name`},
		{"redis://" + h + "?min_retry_backoff=1s&max_retry_backoff=10ms", `min_retry_backoff="1s": larger than max_retry_backoff`},
		// go-redis reads a plain number as seconds: compared as such.
		{"redis://" + h + "?min_retry_backoff=2&max_retry_backoff=1", `min_retry_backoff="2": larger than max_retry_backoff`},
		{"redis://" + h + "?min_retry_backoff=2&max_retry_backoff=1500ms", `min_retry_backoff="2": larger than max_retry_backoff`},
		{"redis://" + h + "?min_retry_backoff=2s&max_retry_backoff=1", `min_retry_backoff="2s": larger than max_retry_backoff`},
		{"redis://" + h + "?read_timeout=99999999999", `read_timeout="99999999999" is not a duration`},
		{"redis://" + h + "?skip_verify=true", "skip_verify is a TLS setting: use the rediss:// scheme for TLS"},
		{"rediss://" + h + "?skip_verify=maybe", `skip_verify="maybe" is not true or false`},
		{"redis://" + h + "?bogus=1", `unknown query parameter "bogus" for scheme redis`},
		{"redis://" + h + "?ttl=100500us", `ttl="100500us": redis expiries are whole milliseconds`},
		{"redis://" + h + "?ttl=50ms", `ttl="50ms": under the minimum TTL of redis URLs, 100ms`},
		{"redis://" + h + "?ttl=0s", `ttl="0s": the TTL must be positive`},
		{"redis://" + h + "?cacert=" + qe(f.CA), "use the rediss:// scheme for TLS"},
		{"rediss://" + h + "?cert=" + qe(f.ClientCert), "cert and key go together"},
		{"rediss://" + h + "?cacert=" + qe(f.ClientKey), "cacert: no PEM certificate"},
		{"rediss://" + h + "?cacert=", "cacert is empty"},
		{"redis://u@" + h + "#x", "a URL fragment (#...) is not allowed"},
		{"redis://u:" + pw + "@[::1/0", "cannot parse the URL: missing ']' in host"},
		{"redis://u:" + pw + "@" + h + "/x", "redis://u:xxxxx@" + h + "/x: path \"/x\" is not a database number"},
		{"rediss://:" + pw + "@" + h + "?cacert=" + qe(f.ClientKey), "rediss://:xxxxx@"},
		{"redis://u:" + pw + "@" + h + "?pool_size=0", "pool_size"},
		{"redis:" + pw + "@" + h, "redis: URL without //"},
		// Sentinel and Cluster.
		{"redis+sentinel://" + h, "master_name is missing"},
		{"redis+sentinel://" + h + "?master_name=m&sentinel_password=", "sentinel_password is empty"},
		{"redis+sentinel://" + h + "?master_name=m&sentinel_username=u", "sentinel_username without sentinel_password"},
		{"redis+sentinel://" + h + "?master_name=m&sentinel_password=" + pw + "&pool_size=0", "pool_size"},
		{"redis+sentinel://" + h + "?master_name=m&sentinel_password=" + pw + "&bogus=1", `unknown query parameter "bogus"`},
		{"redis+sentinel://" + h + ",h:0?master_name=m", `port "0" is not a number`},
		{"redis+sentinel://?master_name=m", "no host: want redis+sentinel://host:port,host:port"},
		{"redis+sentinel://" + h + "/x?master_name=m", `path "/x" is not a database number`},
		{"redis+cluster://" + h + "/1", `a Redis Cluster has database 0 only`},
		{"redis+cluster://" + h + "?master_name=m", `unknown query parameter "master_name" for scheme redis+cluster`},
		{"redis+cluster://" + h + "?addr=h:99999", `port "99999" is not a number`},
		{"redis+cluster://" + h + "?wait_timeout=1s", "wait_timeout without wait_replicas"},
		{"redis+cluster://u:" + pw + "@" + h + "?pool_size=0", "pool_size"},
		{"rediss+cluster://" + h + "?cert=" + qe(f.ClientCert), "cert and key go together"},
		{"redis+cluster://" + h + "?cacert=" + qe(f.CA), "use the rediss:// scheme for TLS"},
		{"redis+ring://" + h, `unknown`},
	})
}

// Open pings within dial_timeout and returns at its context's deadline: a
// closed port and a server that accepts and never answers, over TLS or
// not.
func TestOpenBounded(t *testing.T) {
	silent := urltest.NewSentinel(t).Addr()
	closed := urltest.ClosedPort(t)
	for _, raw := range []string{"redis://" + silent, "rediss://" + silent, "redis://u:p@" + closed, "rediss://" + closed} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := urltest.OpenFails(t, ctx, raw+"/0?dial_timeout=5s", time.Second+500*time.Millisecond)
		cancel()
		assert.ErrorIs(t, err, backend.ErrUnavailable, raw)
		assert.ErrorIs(t, err, context.DeadlineExceeded, raw)
		// The error names the bound it had: the context's 1s, not 5s.
		assert.ErrorContains(t, err, "the context's deadline (before dial_timeout 5s)", raw)
		assert.NotContains(t, err.Error(), "within dial_timeout 5s", raw)
		err = urltest.OpenFails(t, context.Background(), raw+"/0?dial_timeout=1s", 3*time.Second)
		assert.ErrorIs(t, err, backend.ErrUnavailable, raw)
		assert.ErrorContains(t, err, "within dial_timeout 1s", raw)
	}
}

// rediss:// at a plain port says TLS, within dial_timeout: it took 20-25s
// and said "context deadline exceeded". (redis:// at a TLS port:
// TestOpenTLS.)
func TestOpenTLSAtPlainPort(t *testing.T) {
	plain := redistest.Start(t)
	err := urltest.OpenFails(t, context.Background(), "rediss://"+plain.Addr()+"/0?dial_timeout=3s", 5*time.Second)
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	assert.ErrorContains(t, err, "TLS: the server at "+plain.Addr()+" answers plain RESP, without TLS: use the redis:// scheme")
	assert.True(t, strings.Contains(err.Error(), "TLS"))
}
