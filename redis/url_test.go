package redis

import (
	"context"
	"crypto/tls"
	"net/url"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/tlstest"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		raw  string
		addr string
		user string
		db   int
		tls  bool
		cfg  Config
	}{
		{"redis://localhost:6379", "localhost:6379", "", 0, false, Config{Prefix: DefaultPrefix}},
		{"redis://h?clock_floor=true", "h:6379", "", 0, false, Config{Prefix: DefaultPrefix}},
		{"redis://h?clock_floor=false", "h:6379", "", 0, false, Config{Prefix: DefaultPrefix, NoClockFloor: true}},
		{"redis://h", "h:6379", "", 0, false, Config{Prefix: DefaultPrefix}},
		// The largest database index, a printable client name and
		// backoffs in go-redis's seconds form, min at most max.
		{"redis://h/2147483647?client_name=fl~worker-1&min_retry_backoff=1&max_retry_backoff=1", "h:6379", "", 2147483647, false, Config{Prefix: DefaultPrefix}},
		{"redis://u:p@h:6380/3?prefix=locks&ttl=10s", "h:6380", "u", 3, false, Config{Prefix: "locks"}},
		{"rediss://h:6380/0?clock_floor=true&wait_replicas=1", "h:6380", "", 0, true,
			Config{Prefix: DefaultPrefix, WaitReplicas: 1, WaitTimeout: DefaultWaitTimeout}},
		{"redis://h?wait_replicas=2&wait_timeout=50ms&dial_timeout=2s&pool_size=4", "h:6379", "", 0, false,
			Config{Prefix: DefaultPrefix, WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond}},
		{"redis://h?foreign_interval=2s&foreign_gap=400ms", "h:6379", "", 0, false,
			Config{Prefix: DefaultPrefix, ForeignInterval: 2 * time.Second, ForeignGap: 400 * time.Millisecond}},
		{"redis://h?foreign_interval=off", "h:6379", "", 0, false, Config{Prefix: DefaultPrefix, ForeignInterval: -1}},
		{"redis://h?mixed_fleet=true", "h:6379", "", 0, false, Config{Prefix: DefaultPrefix, MixedFleet: true}},
	}
	for _, g := range good {
		u, err := url.Parse(g.raw)
		require.NoError(t, err)
		opt, cfg, err := parseURL(u)
		require.NoError(t, err, g.raw)
		require.Equal(t, g.addr, opt.Addr, g.raw)
		require.Equal(t, g.user, opt.Username, g.raw)
		require.Equal(t, g.db, opt.DB, g.raw)
		require.Equal(t, g.tls, opt.TLSConfig != nil, g.raw)
		require.Equal(t, g.cfg, cfg, g.raw)
	}
	u, _ := url.Parse("redis://h?dial_timeout=2s&pool_size=4")
	opt, _, err := parseURL(u)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, opt.DialTimeout)
	require.Equal(t, 4, opt.PoolSize)

	bad := []string{
		"redis://",                    // no host
		"redis://h?prefix=",           // empty prefix
		"redis://h?prefix=a%7Bb",      // brace in prefix
		"redis://h?clock_floor=maybe", // not a bool
		"redis://h?wait_replicas=-1",  // negative
		"redis://h?wait_replicas=x",   // not a number
		"redis://h?wait_timeout=0s",   // WAIT 0 blocks forever
		"redis://h?wait_timeout=soon", // not a duration
		"redis://h/notadb",            // bad database
		"redis://h?dial_timeout=x",    // go-redis rejects it
		"redis://h?bogus=1",           // unknown parameter (Open)
		"redis://h?ttl=1500us",        // not whole milliseconds (Open)
		"redis://h?ttl=50ms",          // under MinTTL (Open)
	}
	for _, raw := range bad {
		l, err := backend.Open(context.Background(), raw)
		if err == nil {
			_ = l.Close()
		}
		require.Error(t, err, raw)
		require.ErrorIs(t, err, backend.ErrInvalidURL, raw)
	}
}

// TestOpenURL opens a Locker by URL on the test server, with an ACL user
// allowed only the commands and keys the adapter needs.
func TestOpenURL(t *testing.T) {
	prefix := "fl-acl"
	admin := newClient(t, srv.Addr())
	ctx := tctx(t, 20*time.Second)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "fencelock", "reset", "on", ">s3cret",
		"~"+prefix+":*", "&"+prefix+":*",
		"+evalsha", "+eval", "+subscribe", "+unsubscribe", "+ping", "+hello",
		// what the scripts call
		"+get", "+set", "+pexpire", "+pttl", "+incr", "+del", "+publish", "+time",
		"+zadd", "+zrem", "+zrange", "+zrangebyscore", "+zremrangebyscore", "+zscore").Err())
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", "fencelock") })

	raw := "redis://fencelock:s3cret@" + srv.Addr() + "/0?prefix=" + prefix + "&ttl=2s&clock_floor=true"
	la, err := backend.Open(ctx, raw)
	require.NoError(t, err)
	defer la.Close()
	lb, err := backend.Open(ctx, raw)
	require.NoError(t, err)
	defer lb.Close()

	ls, err := la.TryAcquire(ctx, "n")
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, ls.TTL())
	ch := goAcquire(ctx, lb, "n")
	requireBlocked(t, ch, 100*time.Millisecond)
	require.NoError(t, ls.Refresh(ctx))
	start := time.Now()
	release(t, ls)
	r := waitAcquired(t, ch, 5*time.Second)
	require.NoError(t, r.Err)
	require.Less(t, time.Since(start), time.Second, "woken by the release notice, not the fallback timer")
	require.Greater(t, r.Lease.Token(), ls.Token())
	release(t, r.Lease)

	// The user really is confined.
	lo, err := backend.Open(ctx, "redis://fencelock:s3cret@"+srv.Addr()+"/0?prefix=other")
	require.NoError(t, err)
	defer lo.Close()
	_, err = lo.TryAcquire(ctx, "n")
	require.ErrorContains(t, err, "NOPERM")

	// Open pings: a wrong password is an error of Open, not of the first
	// acquisition, and never looks like a held lock.
	_, err = backend.Open(ctx, "redis://fencelock:wrong@"+srv.Addr()+"/0?prefix="+prefix)
	require.ErrorIs(t, err, backend.ErrPermission)
	require.ErrorContains(t, err, "WRONGPASS")
	require.NotContains(t, err.Error(), "wrong@")
}

// TestParseURLTLS: rediss:// takes the TLS files of urlkit.TLS on top
// of go-redis's own settings; redis:// refuses them.
func TestParseURLTLS(t *testing.T) {
	f := tlstest.New(t)
	parse := func(raw string) (*goredis.Options, error) {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		opt, _, err := parseURL(u)
		return opt, err
	}
	opt, err := parse("rediss://h.example:6380/0?prefix=p&" + f.Query())
	require.NoError(t, err)
	require.NotNil(t, opt.TLSConfig.RootCAs)
	require.Len(t, opt.TLSConfig.Certificates, 1)
	require.Equal(t, "h.example", opt.TLSConfig.ServerName, "go-redis's name check stays")
	require.False(t, opt.TLSConfig.InsecureSkipVerify)
	require.GreaterOrEqual(t, opt.TLSConfig.MinVersion, uint16(tls.VersionTLS12))

	opt, err = parse("rediss://h:6380?skip_verify=true&cacert=" + url.QueryEscape(f.CA))
	require.NoError(t, err)
	require.True(t, opt.TLSConfig.InsecureSkipVerify, "skip_verify still works")
	require.NotNil(t, opt.TLSConfig.RootCAs)
	require.Empty(t, opt.TLSConfig.Certificates)

	opt, err = parse("rediss://h:6380")
	require.NoError(t, err)
	require.Nil(t, opt.TLSConfig.RootCAs, "system roots")

	for _, raw := range []string{
		"redis://h?cacert=" + url.QueryEscape(f.CA),
		"redis://h?cert=" + url.QueryEscape(f.ClientCert) + "&key=" + url.QueryEscape(f.ClientKey),
		"rediss://h?cert=" + url.QueryEscape(f.ClientCert),
		"rediss://h?cacert=" + url.QueryEscape(f.ClientKey),
		"rediss://h?cacert=",
	} {
		_, err := parse(raw)
		require.ErrorIs(t, err, backend.ErrInvalidURL, raw)
		l, err := backend.Open(context.Background(), raw)
		if err == nil {
			_ = l.Close()
		}
		require.ErrorIs(t, err, backend.ErrInvalidURL, raw)
	}
}

// ParseURL gives the options and Config Open would use, and refuses what
// Open refuses.
func TestParseURLExported(t *testing.T) {
	opt, cfg, err := ParseURL("redis://:pw@127.0.0.1:7000/2?prefix=p&wait_replicas=1&ttl=5s")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:7000", opt.Addr)
	assert.Equal(t, "pw", opt.Password)
	assert.Equal(t, 2, opt.DB)
	assert.Equal(t, Config{Prefix: "p", WaitReplicas: 1, WaitTimeout: DefaultWaitTimeout}, cfg)
	for _, bad := range []string{"redis://h:1/0?nosuch=1", "redis://h:1/0?ttl=soon", "etcd://h:1/x", "redis://h:1,h:2/0"} {
		_, _, err := ParseURL(bad)
		assert.ErrorIs(t, err, backend.ErrInvalidURL, bad)
	}
}

// ParseFailoverURL and ParseClusterURL give the go-redis options a
// redis+sentinel or redis+cluster URL stands for: the URL's userinfo is
// the data nodes' credentials, sentinel_username and sentinel_password the
// Sentinels', addr more hosts.
func TestParseTopologyURLs(t *testing.T) {
	fo, cfg, err := ParseFailoverURL("redis+sentinel://u:pw@h2,127.0.0.1:26379/3?master_name=m&sentinel_username=su&sentinel_password=sp&addr=h3:1&pool_size=7&prefix=p")
	require.NoError(t, err)
	assert.Equal(t, "m", fo.MasterName)
	assert.Equal(t, []string{"h2:26379", "127.0.0.1:26379", "h3:1"}, fo.SentinelAddrs)
	assert.Equal(t, []string{"u", "pw", "su", "sp"}, []string{fo.Username, fo.Password, fo.SentinelUsername, fo.SentinelPassword})
	assert.Equal(t, 3, fo.DB)
	assert.Equal(t, 7, fo.PoolSize)
	assert.Equal(t, "p", cfg.Prefix)

	co, cfg, err := ParseClusterURL("rediss+cluster://:pw@b,a:7000?addr=c:7002&wait_replicas=1&skip_verify=true")
	require.NoError(t, err)
	assert.Equal(t, []string{"b:6379", "a:7000", "c:7002"}, co.Addrs)
	assert.Equal(t, "pw", co.Password)
	require.NotNil(t, co.TLSConfig)
	assert.Empty(t, co.TLSConfig.ServerName, "each node is verified for its own name")
	assert.Equal(t, 1, cfg.WaitReplicas)

	for _, bad := range []string{"redis://h:1", "redis+cluster://h:1", "redis+sentinel://h:1"} {
		_, _, err := ParseFailoverURL(bad)
		assert.ErrorIs(t, err, backend.ErrInvalidURL, bad)
	}
	_, _, err = ParseClusterURL("redis+sentinel://h:1?master_name=m")
	assert.ErrorIs(t, err, backend.ErrInvalidURL)
	_, _, err = ParseURL("redis+cluster://h:1")
	assert.ErrorIs(t, err, backend.ErrInvalidURL)
}
