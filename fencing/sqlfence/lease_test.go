package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/internal/pgtest"
)

// leaseDB is a database holding a lock table and a docs table written
// under the lease guard.
type leaseDB struct {
	db *sql.DB
	g  *sqlfence.LeaseGuard
}

func openLeaseDB(t *testing.T, prefix string) *leaseDB {
	db := pgtest.Open(t, pgtest.Start(t).NewDatabase(t))
	ctx := context.Background()
	// The lock table as the postgres adapter's schema defines it.
	_, err := db.ExecContext(ctx, `CREATE SEQUENCE `+prefix+`_token;
CREATE TABLE `+prefix+`_locks (name text PRIMARY KEY, owner text, token bigint, expires timestamptz,
	granted timestamptz, holder text, metadata jsonb);
CREATE TABLE docs (id TEXT PRIMARY KEY, body TEXT NOT NULL)`)
	require.NoError(t, err)
	var opts []sqlfence.LeaseOption
	if prefix != sqlfence.DefaultLockPrefix {
		opts = append(opts, sqlfence.WithLockPrefix(prefix))
	}
	g, err := sqlfence.NewLeaseGuard(db, opts...)
	require.NoError(t, err)
	return &leaseDB{db: db, g: g}
}

// grant grants the lock to owner for ttl as the adapter does: a new token
// from the sequence, the expiry by the database's clock.
func (l *leaseDB) grant(t *testing.T, q sqlfence.Querier, name, owner string, ttl time.Duration) fencing.Token {
	var tok int64
	require.NoError(t, q.QueryRowContext(context.Background(), `INSERT INTO fencelock_locks AS l (name, owner, token, expires, granted)
VALUES ($1, $2, nextval('fencelock_token'), clock_timestamp() + $3::bigint * interval '1 millisecond', clock_timestamp())
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, token = EXCLUDED.token, expires = EXCLUDED.expires, granted = EXCLUDED.granted
RETURNING token`, name, owner, ttl.Milliseconds()).Scan(&tok))
	return fencing.Token(tok)
}

func put(id, body string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO docs (id, body) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body`, id, body)
		return err
	}
}

func (l *leaseDB) body(t *testing.T, id string) string {
	var s string
	err := l.db.QueryRow(`SELECT body FROM docs WHERE id = $1`, id).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return s
}

// waitBlockedBy waits until some session waits for a lock held by the
// session whose backend pid is pid. It fails at once if finished reports
// that what should wait has ended instead.
func waitBlockedBy(t *testing.T, db *sql.DB, pid int, finished func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		require.False(t, finished(), "it ended instead of waiting for pid %d", pid)
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n))
		if n > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "nobody waits for pid %d", pid)
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLeaseGuardHolderWrites(t *testing.T) {
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	tok := l.grant(t, l.db, "report", "a", time.Minute)
	require.NoError(t, l.g.Do(ctx, "report", tok, put("d", "by a")))
	require.NoError(t, l.g.Do(ctx, "report", tok, put("d", "by a again")), "one grant writes many times")
	assert.Equal(t, "by a again", l.body(t, "d"))
	require.NoError(t, l.g.Do(ctx, "report", tok, nil), "a nil write checks alone")
	require.NoError(t, fencing.Admit(ctx, l.g.Gate(), "report", tok))

	// A write that fails rolls back with its transaction.
	boom := errors.New("boom")
	err := l.g.Do(ctx, "report", tok, func(ctx context.Context, tx *sql.Tx) error {
		require.NoError(t, put("d", "rolled back")(ctx, tx))
		return boom
	})
	require.ErrorIs(t, err, boom)
	assert.Equal(t, "by a again", l.body(t, "d"))
}

func TestLeaseGuardRejects(t *testing.T) {
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	mustNotRun := func(context.Context, *sql.Tx) error {
		t.Error("write ran under a rejected token")
		return nil
	}

	// Expired, nobody else granted yet.
	old := l.grant(t, l.db, "r", "a", time.Millisecond)
	var expired bool
	for !expired {
		require.NoError(t, l.db.QueryRow(`SELECT expires <= clock_timestamp() FROM fencelock_locks WHERE name = 'r'`).Scan(&expired))
	}
	err := l.g.Do(ctx, "r", old, mustNotRun)
	require.ErrorIs(t, err, sqlfence.ErrLeaseEnded)
	require.ErrorIs(t, err, fencing.ErrStaleToken)
	assert.ErrorContains(t, err, "expired")

	// Granted to someone else: the newer token is named.
	newer := l.grant(t, l.db, "r", "b", time.Minute)
	err = l.g.Do(ctx, "r", old, mustNotRun)
	var st *fencing.StaleTokenError
	require.ErrorAs(t, err, &st)
	assert.Equal(t, fencing.StaleTokenError{Resource: "r", Token: old, Highest: newer}, *st)
	require.NoError(t, l.g.Do(ctx, "r", newer, put("d", "by b")))

	// Released.
	_, err = l.db.Exec(`UPDATE fencelock_locks SET owner = NULL WHERE name = 'r'`)
	require.NoError(t, err)
	err = l.g.Do(ctx, "r", newer, mustNotRun)
	require.ErrorIs(t, err, sqlfence.ErrLeaseEnded)
	assert.ErrorContains(t, err, "released")

	// A token the lock never granted, a lock never taken, bad tokens.
	live := l.grant(t, l.db, "r", "c", time.Minute)
	assert.ErrorIs(t, l.g.Do(ctx, "r", live+1, mustNotRun), sqlfence.ErrLeaseEnded)
	err = l.g.Do(ctx, "never", live, mustNotRun)
	require.ErrorIs(t, err, sqlfence.ErrLeaseEnded)
	assert.ErrorContains(t, err, "never granted")
	assert.ErrorIs(t, l.g.Do(ctx, "r", 0, mustNotRun), fencing.ErrInvalidToken)
	assert.ErrorIs(t, l.g.Do(ctx, "r", math.MaxInt64+1, mustNotRun), sqlfence.ErrTokenRange)
	assert.ErrorIs(t, fencing.Admit(ctx, l.g.Gate(), "r", old), fencing.ErrStaleToken)

	assert.Equal(t, "by b", l.body(t, "d"), "no rejected write landed")
}

// While a write holds its check, a new grant of the lock waits for its
// commit: the write lands before the newer grant, never after it.
func TestLeaseGuardGrantWaitsForWrite(t *testing.T) {
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	tok := l.grant(t, l.db, "r", "a", time.Minute)
	pids, proceed := make(chan int), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.g.Do(ctx, "r", tok, func(ctx context.Context, tx *sql.Tx) error {
			var pid int
			if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			pids <- pid
			<-proceed
			return put("d", "by a")(ctx, tx)
		})
	}()
	pid := <-pids
	granted := make(chan fencing.Token, 1)
	go func() { granted <- l.grant(t, l.db, "r", "b", time.Minute) }()
	waitBlockedBy(t, l.db, pid, func() bool { return len(granted) > 0 })
	require.Empty(t, granted, "granted while the write held its check")
	close(proceed)
	require.NoError(t, <-done)
	newer := <-granted
	assert.Greater(t, newer, tok)
	assert.Equal(t, "by a", l.body(t, "d"))
	assert.ErrorIs(t, l.g.Do(ctx, "r", tok, put("d", "late")), fencing.ErrStaleToken)
}

// A check that meets a grant in progress waits for it and then sees the
// newer token.
func TestLeaseGuardCheckWaitsForGrant(t *testing.T) {
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	tok := l.grant(t, l.db, "r", "a", time.Minute)
	tx, err := l.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	var pid int
	require.NoError(t, tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
	newer := l.grant(t, tx, "r", "b", time.Minute)
	done := make(chan error, 1)
	go func() {
		done <- l.g.Do(ctx, "r", tok, func(context.Context, *sql.Tx) error {
			t.Error("write ran under a superseded token")
			return nil
		})
	}()
	waitBlockedBy(t, l.db, pid, func() bool { return len(done) > 0 })
	require.NoError(t, tx.Commit())
	var st *fencing.StaleTokenError
	require.ErrorAs(t, <-done, &st)
	assert.Equal(t, newer, st.Highest)
}

func TestNewLeaseGuard(t *testing.T) {
	l := openLeaseDB(t, "app_locking")
	_, err := sqlfence.NewLeaseGuard(nil)
	assert.Error(t, err)
	_, err = sqlfence.NewLeaseGuard(l.db, sqlfence.WithLockPrefix("x; DROP TABLE docs --"))
	assert.ErrorContains(t, err, "not a plain SQL identifier")
	g, err := sqlfence.NewLeaseGuard(l.db, sqlfence.WithLockPrefix("public.app_locking"))
	require.NoError(t, err)
	ctx := context.Background()
	var tok int64
	require.NoError(t, l.db.QueryRow(`INSERT INTO app_locking_locks (name, owner, token, expires) VALUES ('r', 'a', 7, clock_timestamp() + interval '1 minute') RETURNING token`).Scan(&tok))
	require.NoError(t, g.Do(ctx, "r", fencing.Token(tok), put("d", "x")))
	require.NoError(t, l.g.Do(ctx, "r", fencing.Token(tok), put("d", "y")))
	assert.Equal(t, "y", l.body(t, "d"))
	def, err := sqlfence.NewLeaseGuard(l.db)
	require.NoError(t, err)
	assert.ErrorContains(t, def.Do(ctx, "r", 7, nil), "fencelock_locks", "the default prefix's table does not exist here")
}

// A write to the database that holds the postgres adapter's locks, fenced
// by the lock's own row in the write's transaction. (Not run: it needs a
// PostgreSQL database.)
func ExampleLeaseGuard_Do() {
	ctx := context.Background()
	db, _ := sql.Open("pgx", "postgres://localhost/shop")
	g, err := sqlfence.NewLeaseGuard(db) // the adapter's default prefix: fencelock_locks
	if err != nil {
		panic(err)
	}
	var token fencing.Token = 34 // lease.Token() of a lock taken through postgres://localhost/shop
	err = g.Do(ctx, "report:2024-06-01", token, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE reports SET body = $1 WHERE day = $2`, "...", "2024-06-01")
		return err
	})
	if errors.Is(err, fencing.ErrStaleToken) {
		fmt.Println("the lease ended or the lock moved on: nothing was written")
	}
}
