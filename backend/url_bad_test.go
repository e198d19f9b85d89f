package backend_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	_ "github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/internal/urltest"
)

const pw = urltest.Secret

// TestOpenBadMemURLs: every bad mem URL is refused, saying which part and
// why, before the driver is made.
func TestOpenBadMemURLs(t *testing.T) {
	urltest.RequireRefused(t, nil, []urltest.Bad{
		{"mem://?ttl=0s", `ttl="0s": the TTL must be positive`},
		{"mem://?ttl=-1s", `ttl="-1s": the TTL must be positive`},
		{"mem://?ttl=ten", `ttl="ten" is not a duration such as 10s`},
		{"mem://?ttl=1s&ttl=2s", "query parameter ttl given 2 times: give it once"},
		{"mem://?holder=a&holder=a", "query parameter holder given 2 times"},
		{"mem://?max_hold=-1s", `max_hold="-1s": must not be negative (0 means no limit)`},
		{"mem://?max_hold=-", `max_hold="-" is not a duration`},
		{"mem://?drift=-1ms", `drift="-1ms": must not be negative`},
		{"mem://?ttl=1s&drift=1s", `drift="1s": the drift margin must be smaller than the TTL (1s)`},
		{"mem://?drift=20s", `drift="20s": the drift margin must be smaller than the TTL (15s)`},
		{"mem://x?ttl=1ns", `ttl="1ns": under the minimum TTL of mem URLs, 10ms`},
		{"mem://x?ttl=9ms", `ttl="9ms": under the minimum TTL of mem URLs, 10ms`},
		{"mem://?lock_delay=-1s", `lock_delay="-1s": must not be negative (0 turns it off)`},
		{"mem://?lock_delay=soon", `lock_delay="soon" is not a duration`},
		{"mem://?auto_renew=maybe", `auto_renew="maybe" is not true or false`},
		{"mem://?auto_renew=", `auto_renew="" is not true or false`},
		{"mem://?holder=", "holder is empty"},
		{"mem://?holder=a%00b", `holder="a\x00b": the holder is not printable UTF-8`},
		{"mem://?holder=%ff", "is not printable UTF-8"},
		{"mem://?tll=1s", `unknown query parameter "tll" for scheme mem (known: auto_renew, drift, holder, lock_delay, max_hold, ttl)`},
		{"mem://?%zz=1", "malformed query: invalid URL escape"},
		{"mem://?ttl=1s;drift=0s", "malformed query: invalid semicolon separator in query"},
		{"mem://?=1", "a query parameter without a name"},
		{"mem://a:1", "mem:// takes a server name, not host:port: want mem://name"},
		{"mem://a,b", "mem:// takes one server name, not a list"},
		{"mem://u@a", "mem://u@a: mem:// takes no user name or password"},
		{"mem://u:" + pw + "@a", "mem://u:xxxxx@a: mem:// takes no user name or password"},
		{"mem://a/path", "unexpected path: want mem://name"},
		{"mem://a#frag", "a URL fragment (#...) is not allowed"},
		{"mem:a", "mem: URL without //: want mem://host/path"},
		{"mem://a\x7f", "cannot parse the URL: invalid control character in URL"},
		{"nosuch://x", `unknown scheme "nosuch" in nosuch://x (known: ` + strings.Join(backend.Schemes(), ", ") + `; import the adapter package to register its scheme)`},
		{"", "empty URL"},
		{"//h/x", "no scheme: want scheme://host/path"},
		{"::not a url", "cannot parse the URL: missing protocol scheme"},
	})
}

// TestOpenNeverLeaksPassword: a URL that carries a password and is refused,
// by url.Parse or by Open's checks, never has the password in the error, in
// any format or in any error of its chain.
func TestOpenNeverLeaksPassword(t *testing.T) {
	urltest.RequireRefused(t, nil, []urltest.Bad{
		// url.Parse quotes its input: never passed on.
		{"etcd://app:" + pw + "@host:notaport/locks", "cannot parse the URL: invalid port after host"},
		{"redis://u:" + pw + "@[::1/0", "cannot parse the URL: missing ']' in host"},
		{"zk://app:" + pw + "/x@h:2181/x", "invalid port after host (a port is a number from 1 to 65535; a password holding / ? # @ or : must be percent-encoded)"},
		{"etcd://app:" + pw + "?x@h/x", "invalid port after host"},
		{"etcd://app:" + pw + "#x@h/x", "invalid port after host"},
		{"redis://app:" + pw + "%zz@h", "cannot parse the URL: invalid URL escape (write % as %25)"},
		{"redis://app:" + pw + "%@h", "invalid URL escape"},
		{"mem://app:" + pw + "@h\x7f", "invalid control character in URL"},
		{"etcd://app:" + pw + "@h\n/x", "invalid control character in URL"},
		{"etcd://app:" + pw + "@h o/x", "cannot parse the URL: invalid character in host name"},
		{"http://u:" + pw + "@h:80:80/", "invalid port"},
		{"etcd://u:" + pw + "@[::1]:x/", "invalid port"},
		{" etcd://u:" + pw + "@h", "cannot parse the URL: first path segment in URL cannot contain colon"},
		{"etcd:app:" + pw + "@h", "etcd: URL without //"},
		{"zk:u:" + pw + "@h:2181", "zk: URL without //"},
		// A password whose start is digits and which holds / ? or # parses
		// as a port and a path, query or fragment: refused, nothing echoed.
		{"nosuch://app:2024/" + pw + "@h/x", "an '@' after the host"},
		{"redis://app:2024/" + pw + "@127.0.0.1:1/0", "an '@' after the host"},
		{"redis://app:2024?" + pw + "@127.0.0.1:1/0", "an '@' after the host"},
		{"etcd://app:2024/" + pw + "@127.0.0.1:1/x", "an '@' after the host"},
		{"zk://app:2024/" + pw + "@127.0.0.1:1/x", "an '@' after the host"},
		{"etcd://app:1234#" + pw + "@h/x", "an '@' after the host"},
		// Parsed, then refused: echoed redacted.
		{"mem:/app:" + pw + "@h", "mem: URL without //"},
		{"nosuch://u:" + pw + "@h", "nosuch://u:xxxxx@h"},
		{"mem://u:" + pw + "@h", "mem://u:xxxxx@h"},
		{"mem://:" + pw + "@h", "mem://:xxxxx@h"},
		{"mem://u:" + pw + "@h#" + pw, "a URL fragment (#...) is not allowed"},
		{"mem://u:" + pw + "@h?ttl=-1s", "the TTL must be positive"},
		{"mem://u:" + pw + "@h?ttl=1s&ttl=1s", "given 2 times"},
		{"mem://u:" + pw + "@h?%zz", "malformed query"},
		{"mem://u:" + pw + "@h?bogus=1", `unknown query parameter "bogus"`},
		{"mem://u:" + pw + "@h?holder=", "holder is empty"},
		{"mem://u:" + pw + "@h:1", "mem://u:xxxxx@h:1: mem:// takes no user name"},
	})
}

// A value out of range matches ErrInvalidOption too, as it did when the
// Locker's checks caught it.
func TestOpenValueErrorsAreOptionErrors(t *testing.T) {
	for _, raw := range []string{"mem://?ttl=0s", "mem://?max_hold=-1s", "mem://?drift=-1s", "mem://?ttl=1s&drift=2s",
		"mem://?ttl=1ns", "mem://?holder=", "mem://?holder=a%0Ab"} {
		_, err := backend.Open(context.Background(), raw)
		assert.ErrorIs(t, err, backend.ErrInvalidOption, raw)
		assert.ErrorIs(t, err, backend.ErrInvalidURL, raw)
	}
}

// CheckURL does the checks of Open that need the backend's limits: a ttl
// under mem.MinTTL passes none of them (it passed CheckURL and failed
// Open).
func TestCheckURLChecksMinTTL(t *testing.T) {
	for _, raw := range []string{"mem://x?ttl=1ns", "mem://x?ttl=9ms"} {
		err := backend.CheckURL(raw)
		assert.ErrorIs(t, err, backend.ErrInvalidURL, raw)
		assert.ErrorIs(t, err, backend.ErrInvalidOption, raw)
		assert.ErrorContains(t, err, "under the minimum TTL of mem URLs, 10ms", raw)
	}
	assert.NoError(t, backend.CheckURL("mem://x?ttl=10ms"))
}

// limitsScheme is a scheme whose Check reports Limits as an adapter's
// does (a minimum TTL of 1s, whole seconds, a default TTL of 2s from the
// URL, as ZooKeeper's session_timeout sets one) and whose Open counts its
// calls: it stands for a dial.
const limitsScheme = "limitstest"

var limitsOpens atomic.Int64

var errLimitsOpened = errors.New("limitstest: Open was called")

func init() {
	driver.Register(limitsScheme, driver.Scheme{
		Check: func(*url.URL) (driver.Limits, error) {
			return driver.Limits{MinTTL: time.Second, DefaultTTL: 2 * time.Second, CheckTTL: func(ttl time.Duration) error {
				if ttl%time.Second != 0 {
					return fmt.Errorf("whole seconds only, got %v", ttl)
				}
				return nil
			}}, nil
		},
		Open: func(context.Context, *url.URL) (driver.Driver, error) {
			limitsOpens.Add(1)
			return nil, fmt.Errorf("%w: %w", backend.ErrUnavailable, errLimitsOpened)
		},
	})
}

// The URL's ttl and drift, and Open's options, are checked against the
// Limits of the scheme's Check before its Open runs (before any dial), in
// CheckURL too for the URL: the drift against the default TTL the URL
// sets, not DefaultTTL (zk://...?session_timeout=1s&drift=5s dialled).
func TestOpenChecksLimitsBeforeDial(t *testing.T) {
	u := limitsScheme + "://x"
	for _, tc := range []struct{ raw, want string }{
		{u + "?drift=2s", `drift="2s": the drift margin must be smaller than the TTL (2s)`},
		{u + "?ttl=3s&drift=3s", `drift="3s": the drift margin must be smaller than the TTL (3s)`},
		{u + "?ttl=500ms", `ttl="500ms": under the minimum TTL of limitstest URLs, 1s`},
		{u + "?ttl=1500ms", `ttl="1500ms": whole seconds only, got 1.5s`},
	} {
		err := backend.CheckURL(tc.raw)
		assert.ErrorIs(t, err, backend.ErrInvalidURL, tc.raw)
		assert.ErrorIs(t, err, backend.ErrInvalidOption, tc.raw)
		assert.ErrorContains(t, err, tc.want, tc.raw)
		_, err = backend.Open(context.Background(), tc.raw)
		assert.ErrorIs(t, err, backend.ErrInvalidURL, tc.raw)
		assert.ErrorContains(t, err, tc.want, tc.raw)
	}
	for name, opt := range map[string]backend.Option{
		"WithTTL(500ms)":        backend.WithTTL(500 * time.Millisecond),
		"WithTTL(1500ms)":       backend.WithTTL(1500 * time.Millisecond),
		"WithTTL(0)":            backend.WithTTL(0),
		"WithDriftMargin(2s)":   backend.WithDriftMargin(2 * time.Second), // the URL's default TTL is 2s
		"WithDriftMargin(-1ms)": backend.WithDriftMargin(-time.Millisecond),
		"WithMaxHold(-1s)":      backend.WithMaxHold(-time.Second),
		`WithHolder("")`:        backend.WithHolder(""),
		`WithHolder("a\nb")`:    backend.WithHolder("a\nb"),
		"WithValue(NUL)":        backend.WithValue("a\x00"),
	} {
		_, err := backend.Open(context.Background(), u, opt)
		assert.ErrorIs(t, err, backend.ErrInvalidOption, name)
		assert.NotErrorIs(t, err, backend.ErrInvalidURL, "%s: an option, not the URL", name)
	}
	assert.Zero(t, limitsOpens.Load(), "the scheme's Open ran before the checks failed")

	// What passes the checks reaches Open.
	for _, raw := range []string{u, u + "?ttl=3s&drift=2s"} {
		require.NoError(t, backend.CheckURL(raw))
		_, err := backend.Open(context.Background(), raw, backend.WithTTL(time.Second), backend.WithDriftMargin(0))
		assert.ErrorIs(t, err, errLimitsOpened, raw)
	}
}
