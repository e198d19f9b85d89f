package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// A migration over a compatible schema (forced: the version comment is
// 0) takes no table lock that a fenced write (FOR SHARE on a lock row) or
// an operation in flight (ROW EXCLUSIVE on the queue) would hold up: it
// completes at once, and a lock operation meanwhile is not queued behind
// it. Before, CREATE INDEX IF NOT EXISTS waited for a SHARE lock on the
// queue table, and every waiter's insert queued behind it.
func TestMigrateTakesNoTableLock(t *testing.T) {
	dsn := srv.NewDatabase(t)
	prefix := testPrefix(t)
	ctx := tctx(t, time.Minute)
	p := newPool(t, dsn)
	require.NoError(t, Migrate(ctx, p, prefix))
	l := locker(t, dsn, Config{Prefix: prefix, NoMigrate: true})
	h, err := l.TryAcquire(ctx, "fenced")
	require.NoError(t, err)
	defer release(t, h)

	tx, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var one int
	require.NoError(t, tx.QueryRow(ctx, "SELECT 1 FROM "+prefix+"_locks WHERE name = 'fenced' FOR SHARE").Scan(&one))
	_, err = tx.Exec(ctx, "LOCK TABLE "+prefix+"_waiters IN ROW EXCLUSIVE MODE")
	require.NoError(t, err)

	_, err = p.Exec(ctx, "COMMENT ON TABLE "+prefix+"_locks IS '"+versionComment+"0'")
	require.NoError(t, err)
	mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, Migrate(mctx, p, prefix))
	require.Less(t, time.Since(start), 2*time.Second)
	current, err := schemaCurrent(ctx, p, prefix)
	require.NoError(t, err)
	require.True(t, current)

	actx, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	other, err := l.TryAcquire(actx, "unrelated")
	require.NoError(t, err)
	release(t, other)
}

// A migration that needs a table lock (a column is missing) while a fenced
// write holds a lock row FOR SHARE gives up after its lock_timeout with
// backend.ErrUnavailable and an error that says why, instead of queueing
// every operation of the prefix behind its ACCESS EXCLUSIVE request until
// the write ends; once the write ends, it succeeds.
func TestMigrateLockTimeout(t *testing.T) {
	dsn := srv.NewDatabase(t)
	prefix := testPrefix(t)
	ctx := tctx(t, time.Minute)
	p := newPool(t, dsn)
	require.NoError(t, Migrate(ctx, p, prefix))
	_, err := p.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s_locks (name) VALUES ('fenced');
		ALTER TABLE %[1]s_locks DROP COLUMN served; COMMENT ON TABLE %[1]s_locks IS '%[2]s0'`, prefix, versionComment))
	require.NoError(t, err)

	tx, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var one int
	require.NoError(t, tx.QueryRow(ctx, "SELECT 1 FROM "+prefix+"_locks WHERE name = 'fenced' FOR SHARE").Scan(&one))

	start := time.Now()
	err = Migrate(ctx, p, prefix)
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.ErrorContains(t, err, "gave up")
	require.Less(t, time.Since(start), migrateLockTimeout+3*time.Second)

	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, Migrate(ctx, p, prefix))
	current, err := schemaCurrent(ctx, p, prefix)
	require.NoError(t, err)
	require.True(t, current)
}

// A database migrated by a later version (SchemaVersion+1, whose
// release_v1 is marked) is not migrated down by this binary: neither a
// Locker's migration nor Migrate nor the SQL of Schema touch its
// functions (the script fails with SQLSTATE ZF002), and the Locker works
// with them. Before, any other version's comment made a Locker migrate,
// so that an older and a newer process overwrote each other's functions.
func TestMigrateNeverDowngrades(t *testing.T) {
	dsn := srv.NewDatabase(t)
	prefix := testPrefix(t)
	ctx := tctx(t, time.Minute)
	p := newPool(t, dsn)
	require.NoError(t, Migrate(ctx, p, prefix))
	var def string
	require.NoError(t, p.QueryRow(ctx, "SELECT pg_get_functiondef(($1 || '_release_v1')::regproc)", prefix).Scan(&def))
	const marker = "-- a later schema version"
	_, err := p.Exec(ctx, strings.Replace(def, "BEGIN\n", "BEGIN\n  "+marker+"\n", 1))
	require.NoError(t, err)
	later := fmt.Sprintf("%s%d", versionComment, SchemaVersion+1)
	_, err = p.Exec(ctx, "COMMENT ON TABLE "+prefix+"_locks IS '"+later+"'")
	require.NoError(t, err)
	untouched := func() {
		t.Helper()
		var src, comment string
		require.NoError(t, p.QueryRow(ctx, "SELECT prosrc, obj_description(($1 || '_locks')::regclass, 'pg_class') FROM pg_proc WHERE oid = ($1 || '_release_v1')::regproc",
			prefix).Scan(&src, &comment))
		require.Contains(t, src, marker)
		require.Equal(t, later, comment)
	}

	l := locker(t, dsn, Config{Prefix: prefix})
	h, err := l.TryAcquire(ctx, "x")
	require.NoError(t, err)
	release(t, h)
	untouched()

	require.NoError(t, Migrate(ctx, p, prefix))
	script, err := Schema(prefix)
	require.NoError(t, err)
	_, err = p.Exec(ctx, script)
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, codeNewerSchema, pe.Code)
	untouched()
}

// The version is read only from this package's comment form; any other
// comment (none, an earlier development's hash) is version 0.
func TestParseVersion(t *testing.T) {
	for c, v := range map[string]int{
		versionComment + "1": 1, versionComment + "12": 12, versionComment + "01": 0, versionComment: 0,
		versionComment + "-1": 0, versionComment + "1 ": 0, "fencelock schema 1234abcd5678ef90": 0, "": 0,
	} {
		require.Equal(t, v, parseVersion(c), c)
	}
}

// Under a default isolation other than READ COMMITTED (a database's
// default_transaction_isolation), the lock functions refuse with SQLSTATE
// ZF001 and a message naming the isolation, not a raw serialization
// failure, a stale read of the queue, or backend.ErrNotAcquired.
func TestIsolationNotReadCommitted(t *testing.T) {
	for _, level := range []string{"serializable", "repeatable read"} {
		t.Run(level, func(t *testing.T) {
			dsn := srv.NewDatabase(t)
			ctx := tctx(t, time.Minute)
			p := newPool(t, dsn)
			_, err := p.Exec(ctx, fmt.Sprintf("DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I SET default_transaction_isolation = %%L', current_database(), '%s'); END $$", level))
			require.NoError(t, err)
			l := locker(t, dsn, Config{Prefix: testPrefix(t)})
			h, err := l.TryAcquire(ctx, "n")
			if h != nil {
				release(t, h)
			}
			var pe *pgconn.PgError
			require.True(t, errors.As(err, &pe), "%v", err)
			require.Equal(t, "ZF001", pe.Code)
			require.ErrorContains(t, err, "isolation is "+level+", the lock functions need read committed")
			require.ErrorContains(t, err, "ALTER ROLE ... SET default_transaction_isolation", "the hint, which says what to change")
			require.NotErrorIs(t, err, backend.ErrNotAcquired)
			require.NotErrorIs(t, err, backend.ErrUnavailable)
		})
	}
}

// A grant that finds no live waiter deletes the lapsed queue rows before
// it marks the queue empty (queued false): none are left behind by a
// holder that expired with only crashed waiters behind it.
func TestLapsedWaitersDeleted(t *testing.T) {
	dsn := srv.NewDatabase(t)
	prefix := testPrefix(t)
	ctx := tctx(t, time.Minute)
	p := newPool(t, dsn)
	require.NoError(t, Migrate(ctx, p, prefix))
	acquire := func(owner string, ttl, mode int) string {
		t.Helper()
		var status string
		require.NoError(t, p.QueryRow(ctx, "SELECT r_status FROM "+prefix+"_acquire_v1('n', $1, $2, $3, NULL, NULL)",
			owner, ttl, mode).Scan(&status))
		return status
	}
	// 1s, not 100ms: the three calls must come within the holder's TTL
	// (under scripts/test --under-load the third came after a 100ms one
	// had lapsed, and was granted).
	require.Equal(t, "granted", acquire("a.1", 1000, 0))
	require.Equal(t, "queued", acquire("b.1", 1000, 1))
	require.Equal(t, "queued", acquire("c.1", 1000, 1))
	time.Sleep(1100 * time.Millisecond) // the holder and both waiters lapse
	require.Equal(t, "granted", acquire("d.1", 60000, 0))
	var n int
	var queued bool
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*), (SELECT queued FROM "+prefix+"_locks WHERE name = 'n') FROM "+prefix+"_waiters").
		Scan(&n, &queued))
	require.Zero(t, n)
	require.False(t, queued)
}

// inspect_v1 reads clock_timestamp(), so it is VOLATILE, not STABLE.
func TestInspectVolatile(t *testing.T) {
	dsn := srv.NewDatabase(t)
	prefix := testPrefix(t)
	ctx := tctx(t, time.Minute)
	p := newPool(t, dsn)
	require.NoError(t, Migrate(ctx, p, prefix))
	var vol string
	require.NoError(t, p.QueryRow(ctx, "SELECT provolatile::text FROM pg_proc WHERE oid = ($1 || '_inspect_v1')::regproc", prefix).Scan(&vol))
	require.Equal(t, "v", vol)
}

// Schema's text without its first line (BEGIN;) and last (COMMIT;) runs in
// a transaction a migration tool opened, as its doc says, and leaves the
// schema current.
func TestSchemaInToolTransaction(t *testing.T) {
	dsn := srv.NewDatabase(t)
	prefix := testPrefix(t)
	ctx := tctx(t, time.Minute)
	p := newPool(t, dsn)
	script, err := Schema(prefix)
	require.NoError(t, err)
	body, ok := strings.CutPrefix(script, "BEGIN;\n")
	require.True(t, ok)
	body, ok = strings.CutSuffix(body, "COMMIT;\n")
	require.True(t, ok)
	tx, err := p.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, body)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	current, err := schemaCurrent(ctx, p, prefix)
	require.NoError(t, err)
	require.True(t, current)
	l := locker(t, dsn, Config{Prefix: prefix, NoMigrate: true})
	h, err := l.TryAcquire(ctx, "n")
	require.NoError(t, err)
	release(t, h)
}
