package pgtest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/pgtest"
)

func TestStartRestart(t *testing.T) {
	c := pgtest.Start(t)
	db := pgtest.Open(t, c.NewDatabase(t))
	_, err := db.Exec(`CREATE TABLE t (v int); INSERT INTO t VALUES (42)`)
	require.NoError(t, err)
	c.Restart(t)
	var v int
	require.NoError(t, db.QueryRow(`SELECT v FROM t`).Scan(&v), "the pool reconnects after the restart")
	require.Equal(t, 42, v)
}

// TestPgBouncerTransactionMode shows PgBouncer pooling per transaction: two
// clients run on one server connection in turn, a session setting made by
// one is seen by the other, and a client in a transaction holds its server
// connection until the transaction ends.
func TestPgBouncerTransactionMode(t *testing.T) {
	c := pgtest.Start(t)
	b := pgtest.StartPgBouncer(t, c)
	ctx := context.Background()
	direct := c.NewDatabase(t)
	dsn := b.Via(t, direct)
	connect := func() *pgx.Conn {
		cfg, err := pgx.ParseConfig(dsn)
		require.NoError(t, err)
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec // no named statements
		conn, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	pid := func(conn *pgx.Conn) (p int32) {
		require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&p))
		return p
	}
	a, bc := connect(), connect()
	pa := pid(a)
	require.Equal(t, pa, pid(bc), "between transactions both clients use the one idle server connection")

	_, err := a.Exec(ctx, `SET statement_timeout = '4321ms'`)
	require.NoError(t, err)
	var v string
	require.NoError(t, bc.QueryRow(ctx, `SHOW statement_timeout`).Scan(&v))
	require.Equal(t, "4321ms", v, "a's session setting is on the server connection b now uses")

	tx, err := a.Begin(ctx)
	require.NoError(t, err)
	var inTx int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&inTx))
	require.NotEqual(t, inTx, pid(bc), "a's open transaction keeps its server connection: b gets another")
	require.NoError(t, tx.Commit(ctx))

	// The direct DSN and the pooled one reach the same database.
	_, err = a.Exec(ctx, `CREATE TABLE t (v int); INSERT INTO t VALUES (7)`)
	require.NoError(t, err)
	var n int
	require.NoError(t, pgtest.Open(t, direct).QueryRow(`SELECT v FROM t`).Scan(&n))
	require.Equal(t, 7, n)
}

// TestPgBouncerRoles: a role created in the cluster logs in through
// PgBouncer too (it is not in PgBouncer's auth_file).
func TestPgBouncerRoles(t *testing.T) {
	c := pgtest.Start(t)
	b := pgtest.StartPgBouncer(t, c)
	direct := c.NewDatabase(t)
	_, err := pgtest.Open(t, direct).Exec(`CREATE ROLE app LOGIN`)
	require.NoError(t, err)
	conn, err := pgx.Connect(context.Background(), strings.Replace(b.Via(t, direct), "postgres@", "app@", 1))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var who string
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT current_user`, pgx.QueryExecModeSimpleProtocol).Scan(&who))
	require.Equal(t, "app", who)
}

// TestKillPauseResume: a killed server comes back with every commit it
// acknowledged, a sequence does not go back; a paused one answers nothing
// until it is resumed; a paused one still stops.
func TestKillPauseResume(t *testing.T) {
	c := pgtest.Start(t)
	db := pgtest.Open(t, c.NewDatabase(t))
	db.SetMaxOpenConns(1)
	_, err := db.Exec(`CREATE SEQUENCE s; CREATE TABLE t (v bigint)`)
	require.NoError(t, err)
	var last int64
	for i := 0; i < 50; i++ {
		require.NoError(t, db.QueryRow(`INSERT INTO t VALUES (nextval('s')) RETURNING v`).Scan(&last))
	}
	require.NoError(t, c.Kill())
	_, err = db.Exec(`SELECT 1`)
	require.Error(t, err, "a killed server answers")
	c.Restart(t)
	var n, next int64
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM t`).Scan(&n))
	require.Equal(t, int64(50), n, "every acknowledged commit survived the kill")
	require.NoError(t, db.QueryRow(`SELECT nextval('s')`).Scan(&next))
	require.Greater(t, next, last)

	require.NoError(t, c.Pause())
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = db.ExecContext(ctx, `SELECT 1`)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a paused server answers")
	require.NoError(t, c.Resume())
	require.Eventually(t, func() bool { _, err := db.Exec(`SELECT 1`); return err == nil }, 30*time.Second, 50*time.Millisecond)

	require.NoError(t, c.Pause())
	c.Stop() // continues it first
	c.Restart(t)
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM t`).Scan(&n))
}

// TestFollow: after its standby was promoted, an old primary that Follow
// rebuilds from the new one is its streaming standby, with the new
// primary's data and without its own last commits; twice over, so that it
// holds a single primary_conninfo.
func TestFollow(t *testing.T) {
	ctx := context.Background()
	a := pgtest.Start(t)
	sb := a.StartStandby(t, false)
	b := sb.Cluster
	_, err := pgtest.Open(t, a.DSN()).Exec(`CREATE TABLE t (v int); INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	sb.CaughtUp(t)
	sb.Link.Partition()
	_, err = pgtest.Open(t, a.DSN()).Exec(`INSERT INTO t VALUES (2)`) // never streamed
	require.NoError(t, err)
	primary, standby := a, sb
	for range 2 {
		require.NoError(t, primary.Kill())
		standby.Promote(t)
		standby.Link.Close()
		old, promoted := primary, standby.Cluster
		next, err := old.Follow(ctx, promoted, false)
		require.NoError(t, err)
		t.Cleanup(next.Link.Close)
		_, err = pgtest.Open(t, promoted.DSN()).Exec(`INSERT INTO t VALUES (3)`)
		require.NoError(t, err)
		next.CaughtUp(t)
		var recovery bool
		var sum int
		require.NoError(t, pgtest.Open(t, old.DSN()).QueryRow(`SELECT pg_is_in_recovery(), (SELECT sum(v) FROM t)`).Scan(&recovery, &sum))
		require.True(t, recovery, "the old primary is a standby")
		require.Equal(t, 4, sum, "the old primary has the new one's rows (1, 3), not its own lost one (2)")
		_, err = pgtest.Open(t, promoted.DSN()).Exec(`DELETE FROM t WHERE v = 3`)
		require.NoError(t, err)
		next.CaughtUp(t)
		primary, standby = promoted, next
	}
	require.Equal(t, a, primary, "two failovers: a is the primary again")
	conf, err := os.ReadFile(filepath.Join(b.DataDir(), "postgresql.auto.conf")) // rebuilt from a, itself rebuilt from b
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(conf), "primary_conninfo"), "%s", conf)
}
