package servers_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance/servers"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/pgtest"
)

// pgHooksWork runs every hook of a PostgreSQL server's member and checks
// what a lock backend needs of each: a killed or stopped server refuses
// connections at once and comes back with its data (the fencing tokens of
// the postgres adapter never go back); a paused or cut-off one answers
// nothing, keeps its connections open, and answers again once it is back.
func pgHooksWork(t *testing.T, s *servers.Server) {
	t.Helper()
	ctx := hookCtx(t)
	m := s.Members[0]
	last := lockToken(t, s.URL)

	for _, h := range []struct {
		name string
		down func(context.Context) error
	}{{"kill", m.Kill}, {"stop", m.Stop}} {
		require.NoError(t, h.down(ctx), h.name)
		start := time.Now()
		require.Error(t, servers.PgSelectWithin(ctx, s.URL, 10*time.Second), "a query after %s", h.name)
		require.Less(t, time.Since(start), 5*time.Second, "after %s, refused at once, not timed out", h.name)
		require.NoError(t, m.Restart(ctx), "restart after %s", h.name)
		next := lockToken(t, s.URL)
		require.Greater(t, next, last, "the token after %s and restart", h.name)
		last = next
	}

	for _, h := range []struct {
		name     string
		down, up func(context.Context) error
	}{{"pause", m.Pause, m.Unpause}, {"disconnect", m.Disconnect, m.Reconnect}} {
		// Docker's published port refuses new connections to a container
		// that left the network and closes those it had: only a paused
		// one, or a local one behind its proxy, leaves them hanging.
		hangs := h.name == "pause" || s.Provider == servers.Local
		before := pgConn(t, ctx, s.URL)
		require.NoError(t, h.down(ctx), h.name)
		start := time.Now()
		err := servers.PgSelectWithin(ctx, s.URL, partitionProbe)
		require.Error(t, err, "a query after %s", h.name)
		if hangs {
			require.GreaterOrEqual(t, time.Since(start), partitionProbe*9/10, "after %s, failed fast (%v), as on a closed connection, not by timing out", h.name, err)
		}
		qctx, cancel := context.WithCancel(ctx)
		answered := make(chan error, 1)
		go func() { _, err := before.Exec(qctx, `SELECT 1`); answered <- err }()
		select {
		case err := <-answered:
			require.False(t, hangs, "a connection opened before %s answered during it: %v", h.name, err)
			require.Error(t, err, "a connection opened before %s answered during it", h.name)
			answered <- err
		case <-time.After(partitionProbe):
		}
		require.NoError(t, h.up(ctx), "undo %s", h.name)
		if !hangs {
			cancel() // it answers or fails, whichever
		}
		select {
		case err := <-answered:
			if hangs {
				require.NoError(t, err, "the query sent during %s, once it ended", h.name)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the connection opened before %s still hangs after it", h.name)
		}
		cancel()
		next := lockToken(t, s.URL)
		require.Greater(t, next, last, "the token after %s", h.name)
		last = next
	}
}

// pgConn connects to dsn, closed when t ends.
func pgConn(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// pgPairWorks checks a PostgreSQL primary with its standby (asynchronous,
// or with sync synchronous): the URL reaches the primary; Failover kills
// it, promotes the standby and rebuilds the old primary as the new one's
// standby, failovers times in a row: after each, the members' Roles are
// what the servers say they are (the standby in recovery, streaming from
// the primary, as its synchronous standby with sync), and a grant through
// the same URL has a token above the last one.
func pgPairWorks(t *testing.T, s *servers.Server, sync bool, failovers int) {
	t.Helper()
	require.Len(t, s.Members, 2)
	require.Contains(t, s.URL, "target_session_attrs=read-write")
	ctx := hookCtx(t)
	p, err := s.Primary(ctx)
	require.NoError(t, err)
	require.Equal(t, s.Members[0], p)
	rolesTrue(t, ctx, s, sync)
	last := lockToken(t, s.URL)
	for i := range failovers {
		old := p
		start := time.Now()
		p, err = s.Failover(ctx)
		require.NoError(t, err, "failover %d", i+1)
		t.Logf("failover %d: %s is the primary, %s its standby, in %v", i+1, p.Name, old.Name, time.Since(start).Round(time.Millisecond))
		require.NotEqual(t, old, p)
		require.Equal(t, "primary", p.Role)
		require.Equal(t, "standby", old.Role)
		now, err := s.Primary(ctx)
		require.NoError(t, err)
		require.Equal(t, p, now)
		rolesTrue(t, ctx, s, sync)
		next := lockToken(t, s.URL)
		require.Greater(t, next, last, "the token after failover %d", i+1)
		last = next
	}
}

// rolesTrue checks that each member of s is what its Role says: the
// primary accepts writes and lists the other as a streaming standby
// (synchronous with sync), which is in recovery.
func rolesTrue(t *testing.T, ctx context.Context, s *servers.Server, sync bool) {
	t.Helper()
	want := "async"
	if sync {
		want = "sync"
	}
	for _, m := range s.Members {
		c := pgConn(t, ctx, memberDSN(t, s.URL, m))
		var recovery bool
		require.NoError(t, c.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovery))
		require.Equal(t, m.Role == "standby", recovery, "%s, %s, in recovery", m.Name, m.Role)
		if m.Role != "primary" {
			continue
		}
		rows, err := c.Query(ctx, `SELECT state || ' ' || sync_state FROM pg_stat_replication`)
		require.NoError(t, err)
		states, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"streaming " + want}, states, "the standbys of %s", m.Name)
	}
}

// memberDSN is the pair's DSN u naming member m alone.
func memberDSN(t *testing.T, u string, m *servers.Member) string {
	t.Helper()
	pu, err := url.Parse(u)
	require.NoError(t, err)
	pu.Host = m.Addr
	q := pu.Query()
	q.Del("target_session_attrs")
	pu.RawQuery = q.Encode()
	return pu.String()
}

// TestLocalPostgresPair: a local primary and its asynchronous streaming
// standby, failed over three times; then once more with its replication
// cut (CutReplication): the promoted standby has lost the last grant,
// whose token the next grant still exceeds (the adapter's clock floor).
func TestLocalPostgresPair(t *testing.T) {
	t.Parallel()
	s := servers.StartWith(t, servers.Local, servers.Postgres, servers.Cluster)
	pgPairWorks(t, s, false, 3)

	ctx := hookCtx(t)
	require.NoError(t, s.CutReplication(ctx))
	lost := lockToken(t, s.URL)
	p, err := s.Failover(ctx)
	require.NoError(t, err)
	var kept int64
	require.NoError(t, pgConn(t, ctx, memberDSN(t, s.URL, p)).QueryRow(ctx,
		`SELECT token FROM fencelock_locks WHERE name = 'hooks'`).Scan(&kept))
	require.Less(t, kept, int64(lost), "the promoted standby has the grant made while its replication was cut")
	rolesTrue(t, ctx, s, false)
	next := lockToken(t, s.URL)
	require.Greater(t, next, lost, "the token after a failover that lost the last grant")
	t.Logf("tokens: %d granted, lost by the failover (the promoted standby had %d), then %d", lost, kept, next)
	require.ErrorIs(t, new(servers.Server).CutReplication(ctx), errors.ErrUnsupported)
}

// TestLocalPostgresSync: a local primary and its synchronous standby,
// failed over three times; then, with the standby cut off (its
// Disconnect), what locktest.SyncStandbyAway checks: a TryAcquire of a
// held lock answers at once, an Acquire of a free one fails with
// ErrUnavailable within about a TTL, the holder's loss signal fires, and
// grants come back with the standby.
func TestLocalPostgresSync(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the synchronous pair is the full run's")
	}
	t.Parallel()
	s := servers.StartWith(t, servers.Local, servers.Postgres, servers.SyncStandby)
	pgPairWorks(t, s, true, 3)

	ctx := hookCtx(t)
	primary, err := s.Primary(ctx)
	require.NoError(t, err)
	standby := s.Members[0]
	if standby == primary {
		standby = s.Members[1]
	}
	pu, err := url.Parse(s.URL)
	require.NoError(t, err)
	q := pu.Query()
	q.Set("ttl", "2s")
	q.Set("connect_timeout", "2")
	q.Set("prefix", "away")
	pu.RawQuery = q.Encode()
	open := func() *backend.Locker {
		l, err := backend.Open(ctx, pu.String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	locktest.SyncStandbyAway(t, open(), open(),
		func() { require.NoError(t, standby.Disconnect(ctx)) },
		func() { require.NoError(t, standby.Reconnect(ctx)) },
		func() { pgtest.WaitSyncRep(t, memberDSN(t, s.URL, primary)) })
}

// TestDockerPostgresPair: a primary and its streaming standby in
// containers, failed over twice (the first primary is the primary again).
func TestDockerPostgresPair(t *testing.T) {
	servers.SkipDockerInShort(t)
	t.Parallel()
	pgPairWorks(t, servers.StartWith(t, servers.Docker, servers.Postgres, servers.Cluster), false, 2)
}

// TestDockerPostgresSync: a primary and its synchronous standby in
// containers, failed over once (the promoted standby's rebuilt standby is
// synchronous).
func TestDockerPostgresSync(t *testing.T) {
	servers.SkipDockerInShort(t)
	t.Parallel()
	pgPairWorks(t, servers.StartWith(t, servers.Docker, servers.Postgres, servers.SyncStandby), true, 1)
}
