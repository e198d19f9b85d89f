package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/postgres"
)

// leaseDB is a database holding the postgres adapter's locks and a docs
// table written under the lease guard.
type leaseDB struct {
	c      *pgtest.Cluster
	dsn    string
	prefix string
	db     *sql.DB
	g      *sqlfence.LeaseGuard
}

func openLeaseDB(t *testing.T, prefix string) *leaseDB {
	c := pgtest.Shared(t)
	dsn := c.NewDatabase(t)
	ctx := context.Background()
	pool := newPool(t, dsn)
	require.NoError(t, postgres.Migrate(ctx, pool, prefix))
	db := pgtest.Open(t, dsn)
	_, err := db.ExecContext(ctx, `CREATE TABLE docs (id TEXT PRIMARY KEY, body TEXT NOT NULL)`)
	require.NoError(t, err)
	var opts []sqlfence.LeaseOption
	if prefix != sqlfence.DefaultLockPrefix {
		opts = append(opts, sqlfence.WithLockPrefix(prefix))
	}
	g, err := sqlfence.NewLeaseGuard(db, opts...)
	require.NoError(t, err)
	return &leaseDB{c: c, dsn: dsn, prefix: prefix, db: db, g: g}
}

func newPool(t *testing.T, dsn string) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// locker is one client of the lock: a Locker of its own over dsn (the
// database's, or a proxy's in front of it).
func (l *leaseDB) locker(t *testing.T, dsn string) *backend.Locker {
	lk, err := postgres.New(newPool(t, dsn), postgres.Config{Prefix: l.prefix})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// acquire takes name with ttl and no renewals: from its grant on, the
// holder behaves as a paused process.
func acquire(t *testing.T, lk *backend.Locker, name string, ttl time.Duration) *backend.Lease {
	ls, err := lk.Acquire(context.Background(), name, backend.WithTTL(ttl), backend.WithAutoRenew(false))
	require.NoError(t, err)
	return ls
}

// waitExpired waits until the lease of name has expired by the database's
// clock, which is the one that counts.
func (l *leaseDB) waitExpired(t *testing.T, name string) {
	t.Helper()
	for {
		var expired bool
		require.NoError(t, l.db.QueryRow(fmt.Sprintf(`SELECT coalesce(expires <= clock_timestamp(), true) FROM %s_locks WHERE name = $1`, l.prefix), name).Scan(&expired))
		if expired {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// waitBlockedBy waits until a session running a statement that contains
// stmt waits for a lock held by the session whose backend pid is pid. It
// fails at once if finished reports that what should wait has ended
// instead.
func waitBlockedBy(t *testing.T, db *sql.DB, pid int, stmt string, finished func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		require.False(t, finished(), "it ended instead of waiting for pid %d", pid)
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)) AND strpos(query, $2) > 0`, pid, stmt).Scan(&n))
		if n > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "no %s waits for pid %d", stmt, pid)
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLeaseGuardHolderWrites(t *testing.T) {
	t.Parallel()
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	lease, err := l.locker(t, l.dsn).Acquire(ctx, "report", backend.WithTTL(time.Minute))
	require.NoError(t, err)
	tok := lease.Token()
	require.NoError(t, l.g.Do(ctx, "report", tok, put("d", "by a")))
	require.NoError(t, l.g.Do(ctx, "report", tok, put("d", "by a again")), "one grant writes many times")
	assert.Equal(t, "by a again", l.body(t, "d"))
	require.NoError(t, l.g.Do(ctx, "report", tok, nil), "a nil write checks alone")
	require.NoError(t, fencing.Admit(ctx, l.g.Gate(), "report", tok))

	// A write that fails rolls back with its transaction.
	boom := errors.New("boom")
	err = l.g.Do(ctx, "report", tok, func(ctx context.Context, tx *sql.Tx) error {
		require.NoError(t, put("d", "rolled back")(ctx, tx))
		return boom
	})
	require.ErrorIs(t, err, boom)
	assert.Equal(t, "by a again", l.body(t, "d"))

	// Released: the token writes no more.
	require.NoError(t, lease.Release(ctx))
	err = l.g.Do(ctx, "report", tok, put("d", "after release"))
	require.ErrorIs(t, err, sqlfence.ErrLeaseEnded)
	assert.ErrorContains(t, err, "released")
	assert.Equal(t, "by a again", l.body(t, "d"))

	t.Run("CommitOutcome", func(t *testing.T) { commitOutcome(t, l) }) // on the same server
}

// After a holder's lease expires its token is refused, before anyone else
// takes the lock and after; the newer grant is named.
func TestLeaseGuardRejects(t *testing.T) {
	t.Parallel()
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	mustNotRun := func(context.Context, *sql.Tx) error {
		t.Error("write ran under a rejected token")
		return nil
	}
	a, b := l.locker(t, l.dsn), l.locker(t, l.dsn)

	// Expired (and freed by its Locker, which saw its deadline pass).
	old := acquire(t, a, "r", postgres.MinTTL).Token()
	l.waitExpired(t, "r")
	err := l.g.Do(ctx, "r", old, mustNotRun)
	require.ErrorIs(t, err, sqlfence.ErrLeaseEnded)
	require.ErrorIs(t, err, fencing.ErrStaleToken)

	newer := acquire(t, b, "r", time.Minute).Token()
	require.Greater(t, newer, old)
	err = l.g.Do(ctx, "r", old, mustNotRun)
	var st *fencing.StaleTokenError
	require.ErrorAs(t, err, &st)
	assert.Equal(t, fencing.StaleTokenError{Resource: "r", Token: old, Highest: newer}, *st)
	require.NoError(t, l.g.Do(ctx, "r", newer, put("d", "by b")))

	// A token the lock never granted, a lock never taken, bad tokens.
	assert.ErrorIs(t, l.g.Do(ctx, "r", newer+1, mustNotRun), sqlfence.ErrLeaseEnded)
	err = l.g.Do(ctx, "never", newer, mustNotRun)
	require.ErrorIs(t, err, sqlfence.ErrLeaseEnded)
	assert.ErrorContains(t, err, "never granted")
	assert.ErrorIs(t, l.g.Do(ctx, "r", 0, mustNotRun), fencing.ErrInvalidToken)
	assert.ErrorIs(t, l.g.Do(ctx, "r", math.MaxInt64+1, mustNotRun), sqlfence.ErrTokenRange)
	assert.ErrorIs(t, fencing.Admit(ctx, l.g.Gate(), "r", old), fencing.ErrStaleToken)

	assert.Equal(t, "by b", l.body(t, "d"), "no rejected write landed")
}

// A write that holds its check while the lease expires makes the next
// grant wait for its commit: it lands before the newer grant, never after.
func TestLeaseGuardGrantWaitsForWrite(t *testing.T) {
	t.Parallel()
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	a, b := l.locker(t, l.dsn), l.locker(t, l.dsn)
	tok := acquire(t, a, "r", 2*time.Second).Token() // long enough for the check on a busy machine

	pids, proceed := make(chan int), make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		wrote <- l.g.Do(ctx, "r", tok, func(ctx context.Context, tx *sql.Tx) error {
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
	l.waitExpired(t, "r") // a plain read: the share lock does not stop it
	granted := make(chan *backend.Lease, 1)
	go func() {
		ls, err := b.Acquire(ctx, "r", backend.WithTTL(time.Minute))
		assert.NoError(t, err)
		granted <- ls
	}()
	waitBlockedBy(t, l.db, pid, "fencelock_acquire_v1", func() bool { return len(granted) > 0 })
	require.Empty(t, granted, "granted while the write held its check")
	close(proceed)
	require.NoError(t, <-wrote, "the check passed while the lease was live: the write commits")
	leaseB := <-granted
	require.NotNil(t, leaseB)
	assert.Greater(t, leaseB.Token(), tok)
	assert.Equal(t, "by a", l.body(t, "d"))
	assert.ErrorIs(t, l.g.Do(ctx, "r", tok, put("d", "late")), fencing.ErrStaleToken)
	require.NoError(t, l.g.Do(ctx, "r", leaseB.Token(), put("d", "by b")))
	assert.Equal(t, "by b", l.body(t, "d"))
}

// The price of the share lock: the holder's own renewal waits for the
// write too. A write that outlives the lease still commits (nobody could be
// granted meanwhile), and the renewal that waited then finds the lease
// expired: the lease is lost.
func TestLeaseGuardLongWriteDelaysRenewal(t *testing.T) {
	t.Parallel()
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	lease, err := l.locker(t, l.dsn).Acquire(ctx, "r", backend.WithTTL(2*time.Second)) // renewing
	require.NoError(t, err)
	pids, proceed := make(chan int), make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		wrote <- l.g.Do(ctx, "r", lease.Token(), func(ctx context.Context, tx *sql.Tx) error {
			var pid int
			if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			pids <- pid
			<-proceed
			return put("d", "long write")(ctx, tx)
		})
	}()
	pid := <-pids
	waitBlockedBy(t, l.db, pid, "fencelock_renew_v1", func() bool { return len(wrote) > 0 })
	l.waitExpired(t, "r")
	close(proceed)
	require.NoError(t, <-wrote)
	assert.Equal(t, "long write", l.body(t, "d"))
	<-lease.Done()
	assert.ErrorIs(t, lease.Err(), backend.ErrLeaseLost)
}

// A check that meets a grant in progress waits for it and then sees the
// newer token. (The adapter's grants commit at once; here one is held
// open in a transaction to meet the check.)
func TestLeaseGuardCheckWaitsForGrant(t *testing.T) {
	t.Parallel()
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	tok := acquire(t, l.locker(t, l.dsn), "r", time.Minute).Token()
	tx, err := l.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	var pid int
	require.NoError(t, tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
	var newer int64
	require.NoError(t, tx.QueryRow(`UPDATE fencelock_locks SET owner = 'intruder', token = token + 1,
expires = clock_timestamp() + interval '1 minute' WHERE name = 'r' RETURNING token`).Scan(&newer))
	done := make(chan error, 1)
	go func() {
		done <- l.g.Do(ctx, "r", tok, func(context.Context, *sql.Tx) error {
			t.Error("write ran under a superseded token")
			return nil
		})
	}()
	waitBlockedBy(t, l.db, pid, "FOR SHARE", func() bool { return len(done) > 0 })
	require.NoError(t, tx.Commit())
	var st *fencing.StaleTokenError
	require.ErrorAs(t, <-done, &st)
	assert.Equal(t, fencing.Token(newer), st.Highest)
}

// The paused holder: A's process stops (here its connections to the
// database hang, through a partitioned proxy), so its renewals stop; its
// lease expires, B takes the lock and writes; A resumes and writes with the
// token it still has, and is refused.
func TestLeaseGuardPausedHolder(t *testing.T) {
	t.Parallel()
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	proxy, err := faultproxy.Start(fmt.Sprintf("127.0.0.1:%d", l.c.Port()))
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	viaProxy := strings.Replace(l.dsn, fmt.Sprintf(":%d/", l.c.Port()), ":"+portOf(proxy.Addr())+"/", 1)
	dbA := pgtest.Open(t, viaProxy)
	guardA, err := sqlfence.NewLeaseGuard(dbA)
	require.NoError(t, err)

	leaseA, err := l.locker(t, viaProxy).Acquire(ctx, "r", backend.WithTTL(time.Second)) // renewing
	require.NoError(t, err)
	require.NoError(t, guardA.Do(ctx, "r", leaseA.Token(), put("d", "by a")))

	proxy.Partition() // A pauses: nothing it sends arrives
	l.waitExpired(t, "r")
	err = l.g.Do(ctx, "r", leaseA.Token(), put("d", "late by a"))
	require.ErrorIs(t, err, sqlfence.ErrLeaseEnded, "refused as soon as the lease expired")
	assert.ErrorContains(t, err, "expired")
	leaseB, err := l.locker(t, l.dsn).Acquire(ctx, "r", backend.WithTTL(time.Minute))
	require.NoError(t, err, "B is granted once A's lease expired")
	require.Greater(t, leaseB.Token(), leaseA.Token())
	require.NoError(t, l.g.Do(ctx, "r", leaseB.Token(), put("d", "by b")))

	proxy.Heal() // A resumes, unaware, and writes
	err = guardA.Do(ctx, "r", leaseA.Token(), put("d", "late by a"))
	var st *fencing.StaleTokenError
	require.ErrorAs(t, err, &st)
	assert.Equal(t, leaseB.Token(), st.Highest)
	assert.Equal(t, "by b", l.body(t, "d"))
	<-leaseA.Done()
	assert.ErrorIs(t, leaseA.Err(), backend.ErrLeaseLost, "A learns it lost the lease when it resumes")
}

// Through a transaction-mode pooler (PgBouncer): the check and the write
// are one transaction, so they share one server connection, and nothing of
// the guard's outlives it. Writers of many goroutines share few server
// connections; the stale token is refused as directly.
func TestLeaseGuardThroughPgBouncer(t *testing.T) {
	t.Parallel()
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	ctx := context.Background()
	// No named prepared statements: they would not survive the transaction
	// (this is the driver's setting, not the guard's).
	db := pgtest.Open(t, pgtest.StartPgBouncer(t, l.c).Via(t, l.dsn)+"&default_query_exec_mode=exec")
	g, err := sqlfence.NewLeaseGuard(db)
	require.NoError(t, err)
	a, b := l.locker(t, l.dsn), l.locker(t, l.dsn)

	old := acquire(t, a, "r", time.Minute)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, g.Do(ctx, "r", old.Token(), put(fmt.Sprint("d", i%4), "by a")))
		}()
	}
	wg.Wait()
	assert.Equal(t, "by a", l.body(t, "d3"))

	require.NoError(t, old.Release(ctx))
	newer := acquire(t, b, "r", time.Minute).Token()
	err = g.Do(ctx, "r", old.Token(), put("d0", "late by a"))
	var st *fencing.StaleTokenError
	require.ErrorAs(t, err, &st)
	assert.Equal(t, newer, st.Highest)
	require.NoError(t, g.Do(ctx, "r", newer, put("d0", "by b")))
	assert.Equal(t, "by b", l.body(t, "d0"))
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

func TestNewLeaseGuard(t *testing.T) {
	t.Parallel()
	l := openLeaseDB(t, "app_locking")
	_, err := sqlfence.NewLeaseGuard(nil)
	assert.Error(t, err)
	_, err = sqlfence.NewLeaseGuard(l.db, sqlfence.WithLockPrefix("x; DROP TABLE docs --"))
	assert.ErrorContains(t, err, "not a plain SQL identifier")
	ctx := context.Background()
	tok := acquire(t, l.locker(t, l.dsn), "r", time.Minute).Token()
	require.NoError(t, l.g.Do(ctx, "r", tok, put("d", "x")), "the adapter's prefix, app_locking_locks")
	g, err := sqlfence.NewLeaseGuard(l.db, sqlfence.WithLockPrefix("public.app_locking"))
	require.NoError(t, err)
	require.NoError(t, g.Do(ctx, "r", tok, put("d", "y")), "schema-qualified")
	assert.Equal(t, "y", l.body(t, "d"))
	def, err := sqlfence.NewLeaseGuard(l.db)
	require.NoError(t, err)
	assert.ErrorContains(t, def.Do(ctx, "r", tok, nil), "fencelock_locks", "the default prefix's table does not exist here")
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

// commitOutcome: a COMMIT the server refuses rolls back, and its error is
// returned as it is; a COMMIT whose answer is lost is ErrOutcomeUnknown,
// for a Guard (the suite's LostAnswer) and a LeaseGuard alike, when the
// write landed.
func commitOutcome(t *testing.T, l *leaseDB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	g, err := sqlfence.New(l.db)
	require.NoError(t, err)
	require.NoError(t, g.CreateTable(ctx))
	_, err = l.db.ExecContext(ctx, `CREATE TABLE once (v INT, CONSTRAINT once_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	err = g.Do(ctx, "r", 5, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO once VALUES (1), (1)`) // checked at COMMIT
		return err
	})
	var se interface{ SQLState() string }
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "23505", se.SQLState())
	assert.NotErrorIs(t, err, fencing.ErrOutcomeUnknown, "a refused COMMIT rolled back")
	h, err := g.Highest(ctx, "r")
	require.NoError(t, err)
	assert.Zero(t, h)

	lease, err := l.locker(t, l.dsn).Acquire(ctx, "outcome", backend.WithTTL(time.Minute))
	require.NoError(t, err)
	proxy, err := faultproxy.Start(fmt.Sprintf("127.0.0.1:%d", l.c.Port()))
	require.NoError(t, err)
	defer proxy.Close()
	defer proxy.Heal()
	lg, err := sqlfence.NewLeaseGuard(pgtest.Open(t, proxiedDSN(t, l.dsn, proxy)))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- lg.Do(ctx, "outcome", lease.Token(), func(ctx context.Context, tx *sql.Tx) error {
			if err := put("o", "landed")(ctx, tx); err != nil {
				return err
			}
			proxy.HoldReplies() // the COMMIT passes, its answer is held
			return nil
		})
	}()
	for l.body(t, "o") != "landed" {
		select {
		case err := <-done:
			t.Fatalf("Do returned before its write landed: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	proxy.Drop()
	proxy.Heal()
	err = <-done
	require.ErrorIs(t, err, fencing.ErrOutcomeUnknown)
	t.Log(err)
}
