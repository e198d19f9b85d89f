package urlkit_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/urlkit"
	"github.com/fencelock/fencelock/internal/urltest"
)

const pw = urltest.Secret

func TestHostPort(t *testing.T) {
	for in, want := range map[string]string{"h": "h:99", "h:1": "h:1", "[::1]": "[::1]:99", "[::1]:7": "[::1]:7", "10.0.0.1:65535": "10.0.0.1:65535"} {
		got, err := urlkit.HostPort(in, "99")
		require.NoErrorf(t, err, "%q", in)
		assert.Equalf(t, want, got, "%q", in)
	}
	for _, bad := range []string{"", ":1", "::1", "h:0", "h:65536", "h:x", "a/b:1", "[::1]:"} {
		_, err := urlkit.HostPort(bad, "99")
		assert.Errorf(t, err, "%q", bad)
	}
}

func TestUser(t *testing.T) {
	for raw, want := range map[string][2]string{
		"etcd://h/x": {"", ""}, "etcd://u@h/x": {"u", ""}, "etcd://u:p%40ss@h/x": {"u", "p@ss"},
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		user, password, err := urlkit.User(u)
		require.NoErrorf(t, err, "%q", raw)
		assert.Equalf(t, want, [2]string{user, password}, "%q", raw)
	}
	u, err := url.Parse("zk://:pw@h/x")
	require.NoError(t, err)
	_, _, err = urlkit.User(u)
	assert.ErrorContains(t, err, "empty user name")
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"etcd://u:" + pw + "@h/x": "etcd://u:xxxxx@h/x",
		"etcd://u@h/x":            "etcd://u@h/x",
		"etcd:u:" + pw + "@h":     "etcd:xxxxx",
		"etcd://h/x#" + pw:        "etcd://h/x#xxxxx",
		"etcd:/u:" + pw + "@h":    "etcd:/xxxxx",
	} {
		u, err := urlkit.Parse(raw)
		if err != nil { // opaque and fragments are refused by ParseURL
			u = mustURL(t, raw)
		}
		assert.Equal(t, want, urlkit.Redact(u), raw)
	}
}

func TestQueryStrict(t *testing.T) {
	q, err := urlkit.Query(mustURL(t, "x://h?a=1&b=&c"))
	require.NoError(t, err)
	assert.Equal(t, "1", q.Get("a"))
	assert.True(t, q.Has("b") && q.Has("c"))
	for _, raw := range []string{"x://h?a=1&a=2", "x://h?a=%zz", "x://h?a=1;b=2", "x://h?=1", "x://h?a&a"} {
		_, err := urlkit.Query(mustURL(t, raw))
		assert.ErrorIs(t, err, driver.ErrInvalidURL, raw)
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}

// Bound names the bound a dial has: the URL's timeout, or the context's
// deadline when it comes first (a command's --connect-timeout).
func TestBound(t *testing.T) {
	assert.Equal(t, "dial_timeout 5s", urlkit.Bound(context.Background(), "dial_timeout", 5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	assert.Equal(t, "dial_timeout 5s", urlkit.Bound(ctx, "dial_timeout", 5*time.Second), "the timeout comes first")
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got := urlkit.Bound(ctx, "connect_timeout", 5*time.Second)
	assert.Regexp(t, `^(2s|1\.9\d*s), the context's deadline \(before connect_timeout 5s\)$`, got)
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	assert.Equal(t, "0s, the context's deadline (before dial_timeout 5s)", urlkit.Bound(ctx, "dial_timeout", 5*time.Second))
}
