// Command batchjob is a critical section that does need a lock: a nightly
// settlement that reads orders from PostgreSQL, writes an export file, and
// then updates a summary row and a ledger — several steps over two systems
// that no single statement can make atomic, and that must not run twice at
// once. It runs under a lease, and every write carries the lease's token,
// so a run whose lease was lost mid-way (a pause, a partition) is refused
// at its next write instead of interleaving with the run that took over.
//
//	go run ./examples/batchjob -dsn "$DATABASE_URL" -dir /tmp/exports
//	go run ./examples/batchjob -url etcd://127.0.0.1:2379/locks -dsn ...
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/backend/mem"
	_ "github.com/fencelock/fencelock/etcd"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/filefence"
	"github.com/fencelock/fencelock/fencing/sqlfence"
)

func main() {
	url := flag.String("url", "mem://batchjob", "lock backend URL")
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL DSN (default $DATABASE_URL)")
	dir := flag.String("dir", os.TempDir()+"/fencelock-batchjob", "export directory")
	flag.Parse()
	ctx := context.Background()
	j, err := open(ctx, *dsn, *dir)
	if err == nil {
		defer j.db.Close()
		var locker *backend.Locker
		if locker, err = backend.Open(ctx, *url); err == nil {
			defer locker.Close()
			_, err = j.runLocked(ctx, locker, os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "batchjob:", err)
		os.Exit(1)
	}
}

type job struct {
	db      *sql.DB
	exports *filefence.Guard
	summary sqlfence.Table
	ledger  *sqlfence.Guard
}

func open(ctx context.Context, dsn, dir string) (*job, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `
CREATE TABLE IF NOT EXISTS orders (id SERIAL PRIMARY KEY, amount_cents BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS settlement_summary (day DATE PRIMARY KEY, orders INT NOT NULL, total_cents BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (day DATE PRIMARY KEY, entry TEXT NOT NULL)`); err != nil {
		db.Close()
		return nil, err
	}
	exports, err := filefence.New(dir)
	if err != nil {
		db.Close()
		return nil, err
	}
	j := &job{db: db, exports: exports, summary: sqlfence.Table{Name: "settlement_summary", Key: "day"}}
	if err := j.summary.AddFenceColumn(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	if j.ledger, err = sqlfence.New(db); err == nil {
		err = j.ledger.CreateTable(ctx)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return j, nil
}

// runLocked takes the lock and runs the job under its lease.
func (j *job) runLocked(ctx context.Context, locker *backend.Locker, out io.Writer) (fencing.Token, error) {
	lease, err := locker.Acquire(ctx, "nightly-settlement")
	if err != nil {
		return 0, err
	}
	defer lease.Release(context.WithoutCancel(ctx))
	fmt.Fprintf(out, "lease acquired: token %s\n", lease.Token())
	// Work under lease.Context(): it is cancelled when the lease is lost, so
	// a holder that notices stops; the token stops one that does not.
	return lease.Token(), j.run(lease.Context(), lease.Token(), out)
}

// run is the job's steps; every write carries token.
func (j *job) run(ctx context.Context, token fencing.Token, out io.Writer) error {
	day := "2024-06-01"
	// Step 1: read.
	var n int
	var total int64
	if err := j.db.QueryRowContext(ctx, `SELECT count(*), COALESCE(sum(amount_cents), 0) FROM orders`).Scan(&n, &total); err != nil {
		return err
	}
	// Step 2: the export file, fenced by the token in the file.
	export := fmt.Sprintf("day,orders,total_cents\n%s,%d,%d\n", day, n, total)
	if err := j.exports.WriteFile(ctx, "settlement-"+day+".csv", token, []byte(export)); err != nil {
		return fmt.Errorf("step 2 (export): %w", err)
	}
	fmt.Fprintf(out, "step 2: export written under token %s\n", token)
	// Step 3: the summary row, fenced by its own column in one statement.
	if err := j.summary.Upsert(ctx, j.db, day, token, []string{"orders", "total_cents"}, []any{n, total}); err != nil {
		return fmt.Errorf("step 3 (summary): %w", err)
	}
	fmt.Fprintf(out, "step 3: summary row written under token %s\n", token)
	// Step 4: the ledger entry, in the same transaction as the token record.
	err := j.ledger.Do(ctx, "ledger/"+day, token, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO ledger (day, entry) VALUES ($1, $2)
ON CONFLICT (day) DO UPDATE SET entry = EXCLUDED.entry`, day, fmt.Sprintf("settled %d orders, %d cents (token %s)", n, total, token))
		return err
	})
	if err != nil {
		return fmt.Errorf("step 4 (ledger): %w", err)
	}
	fmt.Fprintf(out, "step 4: ledger entry written under token %s\n", token)
	return nil
}
