// Command pglease keeps a lock and the data it protects in one PostgreSQL
// database: the postgres:// backend's lock table and the application's
// tables side by side, and every write checked against the lock's own row
// in the write's transaction (sqlfence.LeaseGuard). Two workers take turns
// at the nightly rollup; the first pauses past its lease (a GC pause,
// SIGSTOP: no renewals), the lock moves to the second, and the first's late
// write is refused.
//
//	go run ./examples/pglease -dsn "$DATABASE_URL"
//
// No fence table or column is needed: the lock's row is the fence, and the
// check and the write commit together or not at all.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/postgres"
)

// lockName is the lock both workers take before writing the rollup.
const lockName = "rollup:2024-06-01"

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL URL, postgres://... (default $DATABASE_URL): the locks and the data")
	ttl := flag.Duration("ttl", time.Second, "lease TTL")
	flag.Parse()
	res, err := run(context.Background(), *dsn, *ttl, os.Stdout)
	if err == nil && !errors.Is(res.Late, fencing.ErrStaleToken) {
		err = fmt.Errorf("the paused worker's late write was not refused: %v", res.Late)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pglease:", err)
		os.Exit(1)
	}
}

// Result is what the timeline produced.
type Result struct {
	TokenA, TokenB fencing.Token // the tokens A and B were granted
	Late           error         // what A's late write returned
	WrittenBy      string        // who wrote the rollup that stands
	Log            []string      // every committed write, in order: "A@token"
}

// worker is one process: one connection pool, which its Locker and its
// database/sql handle share.
type worker struct {
	name   string
	pool   *pgxpool.Pool
	locker *backend.Locker
	db     *sql.DB
	guard  *sqlfence.LeaseGuard
}

func openWorker(ctx context.Context, name, dsn string) (*worker, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	locker, err := postgres.New(pool, postgres.Config{}) // its tables: fencelock_locks, ... (made on first use)
	if err != nil {
		pool.Close()
		return nil, err
	}
	db := stdlib.OpenDBFromPool(pool)
	guard, err := sqlfence.NewLeaseGuard(db) // reads fencelock_locks
	if err != nil {
		_ = locker.Close()
		_ = db.Close()
		pool.Close()
		return nil, err
	}
	return &worker{name: name, pool: pool, locker: locker, db: db, guard: guard}, nil
}

func (w *worker) Close() {
	_ = w.locker.Close()
	_ = w.db.Close()
	w.pool.Close()
}

// write stores the rollup under the lease's token: both statements run on
// the guard's transaction, after the check that the token is the lock's
// live grant, and commit with it.
func (w *worker) write(ctx context.Context, token fencing.Token, total int64) error {
	return w.guard.Do(ctx, lockName, token, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO pglease_rollups (day, total, written_by) VALUES ('2024-06-01', $1, $2)
ON CONFLICT (day) DO UPDATE SET total = EXCLUDED.total, written_by = EXCLUDED.written_by`, total, w.name); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO pglease_log (entry) VALUES ($1)`, fmt.Sprintf("%s@%d", w.name, token))
		return err
	})
}

func run(ctx context.Context, dsn string, ttl time.Duration, out io.Writer) (Result, error) {
	var res Result
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	say := func(who, format string, args ...any) {
		fmt.Fprintf(out, "%+7.3fs  %-3s %s\n", time.Since(start).Seconds(), who, fmt.Sprintf(format, args...))
	}

	a, err := openWorker(ctx, "A", dsn)
	if err != nil {
		return res, err
	}
	defer a.Close()
	b, err := openWorker(ctx, "B", dsn)
	if err != nil {
		return res, err
	}
	defer b.Close()
	if _, err := a.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS pglease_rollups (day text PRIMARY KEY, total bigint NOT NULL, written_by text NOT NULL);
CREATE TABLE IF NOT EXISTS pglease_log (id bigserial PRIMARY KEY, entry text NOT NULL);
TRUNCATE pglease_rollups, pglease_log`); err != nil {
		return res, err
	}

	// A's renewals are off: from its first write on, it behaves as a
	// process that has stopped (GC pause, SIGSTOP) while it holds the lock.
	leaseA, err := a.locker.Acquire(ctx, lockName, backend.WithTTL(ttl), backend.WithAutoRenew(false))
	if err != nil {
		return res, fmt.Errorf("acquire by A: %w", err)
	}
	defer leaseA.Release(context.WithoutCancel(ctx))
	res.TokenA = leaseA.Token()
	say("A", "acquires %s: token %s", lockName, res.TokenA)
	if err := a.write(ctx, res.TokenA, 100); err != nil {
		return res, fmt.Errorf("write by A: %w", err)
	}
	say("A", "writes the rollup in the lease's transaction: committed")
	say("A", "pauses: no renewals; its lease runs out by the database's clock")

	leaseB, err := b.locker.Acquire(ctx, lockName, backend.WithTTL(ttl))
	if err != nil {
		return res, fmt.Errorf("acquire by B: %w", err)
	}
	defer leaseB.Release(context.WithoutCancel(ctx))
	res.TokenB = leaseB.Token()
	say("B", "acquires %s once A's lease expired: token %s", lockName, res.TokenB)
	if err := b.write(ctx, res.TokenB, 120); err != nil {
		return res, fmt.Errorf("write by B: %w", err)
	}
	say("B", "writes the rollup: committed")

	say("A", "wakes up, still believes it holds the lock, writes with token %s", res.TokenA)
	res.Late = a.write(ctx, res.TokenA, 999)
	if res.Late == nil {
		say("db", "ACCEPTS the late write: fencing failed")
	} else {
		say("db", "refuses it: %v", res.Late)
	}

	if err := a.db.QueryRowContext(ctx, `SELECT written_by FROM pglease_rollups WHERE day = '2024-06-01'`).Scan(&res.WrittenBy); err != nil {
		return res, err
	}
	rows, err := a.db.QueryContext(ctx, `SELECT entry FROM pglease_log ORDER BY id`)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			return res, err
		}
		res.Log = append(res.Log, e)
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	say("db", "the rollup is B's; committed writes: %v", res.Log)
	return res, nil
}
