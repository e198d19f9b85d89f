package postgres

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// listen_host gives the listener the URL's settings with its own host:
// with pgx's default sslmode (prefer) it keeps the plain-text fallback, so
// it connects to a server without TLS (it lost the fallback, and never
// connected: waiters were granted only by their renewals, TTL/3); with
// verify-full it checks the listener's host in the server's certificate,
// not the pooler's.
func TestListenHostConfig(t *testing.T) {
	dsn := strings.Replace(srv.NewDatabase(t), "sslmode=disable", "application_name=fl", 1)
	require.NotContains(t, dsn, "sslmode")
	u, err := url.Parse(dsn + "&listen_host=127.0.0.1:" + strconv.Itoa(srv.Port()))
	require.NoError(t, err)
	_, cfg, err := parseURL(u)
	require.NoError(t, err)
	ctx := tctx(t, 30*time.Second)
	conn, err := pgx.ConnectConfig(ctx, cfg.Listen)
	require.NoError(t, err, "the listener's configuration connects to a server without TLS under sslmode=prefer")
	require.NoError(t, conn.Close(ctx))

	u, err = url.Parse("postgres://app@pgbouncer.internal:6432/app?sslmode=verify-full&host=pgbouncer.internal&listen_host=db.internal:5433")
	require.NoError(t, err)
	_, cfg, err = parseURL(u)
	require.NoError(t, err)
	require.Equal(t, "db.internal", cfg.Listen.Host)
	require.Equal(t, uint16(5433), cfg.Listen.Port)
	require.NotNil(t, cfg.Listen.TLSConfig)
	require.Equal(t, "db.internal", cfg.Listen.TLSConfig.ServerName, "verify-full checks the listener's host")
	require.Empty(t, cfg.Listen.Fallbacks)
}

// A listener configured from the pool given to New runs the pool's
// BeforeConnect hook (credentials that rotate, settings) before it
// connects, as the pool's own connections do.
func TestListenerRunsBeforeConnect(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	ctx := tctx(t, time.Minute)
	pc, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	pc.BeforeConnect = func(_ context.Context, c *pgx.ConnConfig) error {
		c.RuntimeParams["application_name"] = "fl_before_connect"
		return nil
	}
	p, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	waiter, err := New(p, Config{Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiter.Close() })
	holder := locker(t, dsn, Config{Prefix: prefix})
	ls, err := holder.Acquire(ctx, "x")
	require.NoError(t, err)
	ch := goAcquire(ctx, waiter, "x") // starts the waiter's listener
	requireBlocked(t, ch, 100*time.Millisecond)
	admin := newPool(t, dsn)
	require.Eventually(t, func() bool {
		var app string
		err := admin.QueryRow(ctx, `SELECT application_name FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&app)
		return err == nil && app == "fl_before_connect"
	}, 10*time.Second, 5*time.Millisecond, "the listener's session shows the hook's application_name")
	release(t, ls)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	release(t, r.Lease)
}
