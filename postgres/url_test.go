package postgres

import (
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		raw    string
		host   string
		port   uint16
		db     string
		user   string
		cfg    Config
		listen string // the listener's host:port, if set apart
	}{
		{"postgres://localhost:5432/app", "localhost", 5432, "app", "", Config{}, ""},
		{"postgresql://u:p@h/app?sslmode=disable", "h", 5432, "app", "u", Config{}, ""},
		{"postgres://h:6432/app?prefix=locks&migrate=false&ttl=10s&holder=me", "h", 6432, "app", "", Config{Prefix: "locks", NoMigrate: true}, ""},
		{"postgres://h/app?listen=false&pool_max_conns=4&application_name=x", "h", 5432, "app", "", Config{NoListen: true}, ""},
		{"postgres://bouncer:6432/app?listen_host=db:5433", "bouncer", 6432, "app", "", Config{}, "db:5433"},
		{"postgres://h/app?migrate=true&listen=true", "h", 5432, "app", "", Config{}, ""},
	}
	for _, g := range good {
		u, err := url.Parse(g.raw)
		require.NoError(t, err)
		pc, cfg, err := parseURL(u)
		require.NoError(t, err, g.raw)
		require.Equal(t, g.host, pc.ConnConfig.Host, g.raw)
		require.Equal(t, g.port, pc.ConnConfig.Port, g.raw)
		require.Equal(t, g.db, pc.ConnConfig.Database, g.raw)
		if g.user != "" {
			require.Equal(t, g.user, pc.ConnConfig.User, g.raw)
		}
		// Nothing of the adapter's or the common parameters reaches the
		// server as a runtime setting.
		for _, k := range []string{"prefix", "migrate", "listen", "listen_host", "ttl", "holder"} {
			require.NotContains(t, pc.ConnConfig.RuntimeParams, k, g.raw)
		}
		require.Equal(t, DefaultConnectTimeout, pc.ConnConfig.ConnectTimeout, g.raw)
		listen := cfg.Listen
		cfg.Listen = nil
		require.Equal(t, g.cfg, cfg, g.raw)
		if g.listen == "" {
			require.Nil(t, listen, g.raw)
		} else {
			require.NotNil(t, listen, g.raw)
			require.Equal(t, g.listen, listen.Host+":"+strconv.Itoa(int(listen.Port)), g.raw)
			require.Equal(t, "app", listen.Database, g.raw)
		}
	}
	u, _ := url.Parse("postgres://h/app?application_name=fl&connect_timeout=2&pool_max_conns=3")
	pc, _, err := parseURL(u)
	require.NoError(t, err)
	require.Equal(t, "fl", pc.ConnConfig.RuntimeParams["application_name"])
	require.Equal(t, 2*time.Second, pc.ConnConfig.ConnectTimeout)
	require.Equal(t, int32(3), pc.MaxConns)
}

// TestOpenURL opens Lockers by URL, under both schemes, on the test
// server: a grant, a waiter woken by the release, and the Locker of a
// URL with migrate=false on a database without the schema failing with a
// clear error.
func TestOpenURL(t *testing.T) {
	dsn := srv.NewDatabase(t)
	ctx := tctx(t, 30*time.Second)
	la, err := backend.Open(ctx, dsn+"&prefix=fl_url&ttl=2s")
	require.NoError(t, err)
	defer la.Close()
	lb, err := backend.Open(ctx, "postgresql"+dsn[len("postgres"):]+"&prefix=fl_url")
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
	require.Less(t, time.Since(start), time.Second, "woken by the notification, not the fallback timer")
	require.Greater(t, r.Lease.Token(), ls.Token())
	release(t, r.Lease)

	lc, err := backend.Open(ctx, dsn+"&prefix=fl_other&migrate=false")
	require.NoError(t, err, "Open does not read the schema when told not to migrate")
	defer lc.Close()
	_, err = lc.TryAcquire(ctx, "n")
	require.ErrorContains(t, err, "postgres.Migrate")
	require.NotErrorIs(t, err, backend.ErrNotAcquired)
}
