package postgres

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
)

// A waiter is registered with its Locker's listener before its first
// statement, even while the listener is down: when the listener comes up
// during that statement and the lock is granted to the waiter before the
// statement's answer arrives, the grant's notification reaches the waiter,
// which returns as soon as the answer does. (Registered only after the
// answer, it missed both the listener's reconnection and the notification,
// and waited for its next renewal, TTL/3, or the holder's TTL.)
func TestWaiterRegisteredBeforeFirstAttempt(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	ctx := tctx(t, time.Minute)
	ttl := backend.WithTTL(30 * time.Second)
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.Port()))
	stmts, err := faultproxy.Start(target) // the waiter's statements
	require.NoError(t, err)
	t.Cleanup(stmts.Close)
	listen, err := faultproxy.Start(target) // its listener
	require.NoError(t, err)
	t.Cleanup(listen.Close)
	pc, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	lc := pc.ConnConfig.Copy()
	pc.ConnConfig.Host, pc.ConnConfig.Port = proxyHostPort(t, stmts)
	lc.Host, lc.Port = proxyHostPort(t, listen)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// Two connections open before any reply is held: a waiter whose
	// statement needed a new one (the other busy with the first waiter's,
	// on a loaded machine) would have its handshake's answer held too,
	// and never queue (seen once in the quick tier).
	c1, err := pool.Acquire(ctx)
	require.NoError(t, err)
	c2, err := pool.Acquire(ctx)
	require.NoError(t, err)
	c1.Release()
	c2.Release()
	d, err := newDriver(pool, Config{Prefix: prefix, Listen: lc}, nil)
	require.NoError(t, err)
	w, err := backend.New(d, ttl)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	holder := locker(t, dsn, Config{Prefix: prefix}, ttl)
	hx, err := holder.Acquire(ctx, "x")
	require.NoError(t, err)
	hy, err := holder.Acquire(ctx, "y")
	require.NoError(t, err)

	// The listener, started by a first waiter, cannot connect yet.
	listen.Partition()
	wy := goAcquire(ctx, w, "y")
	requireBlocked(t, wy, 200*time.Millisecond)
	require.False(t, d.hub.listening())

	// The second waiter's first statement queues it; its answer is held.
	stmts.HoldReplies()
	wx := goAcquire(ctx, w, "x")
	require.Eventually(t, func() bool {
		st, err := holder.Status(ctx, "x")
		return err == nil && len(st.Waiters) == 1
	}, 10*time.Second, 5*time.Millisecond)
	// The listener comes up, and the lock is granted to the waiter: the
	// notification comes before the statement's answer.
	listen.Heal()
	require.Eventually(t, d.hub.listening, 10*time.Second, 5*time.Millisecond)
	release(t, hx)
	time.Sleep(200 * time.Millisecond) // the notification is delivered
	start := time.Now()
	stmts.Heal()
	r := waitAcquired(t, wx, 15*time.Second)
	require.NoError(t, r.Err)
	require.Less(t, time.Since(start), 3*time.Second, "granted by the notification, not by a renewal (TTL/3)")
	release(t, r.Lease)
	release(t, hy)
	r = waitAcquired(t, wy, 10*time.Second)
	require.NoError(t, r.Err)
	release(t, r.Lease)
}

// proxyHostPort is the address of p as pgx's Host and Port.
func proxyHostPort(t *testing.T, p *faultproxy.Proxy) (string, uint16) {
	host, port, err := net.SplitHostPort(p.Addr())
	require.NoError(t, err)
	n, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	return host, uint16(n)
}
