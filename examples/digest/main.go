// Command digest sends a daily digest exactly once although N workers run
// it at the same moment, without any lock: the database's unique key decides.
//
//	INSERT INTO digest_runs (run_date, sent_by) VALUES ($1, $2)
//	ON CONFLICT (run_date) DO NOTHING RETURNING run_date
//
// The worker that gets a row back sends; the others get no row and skip.
//
//	go run ./examples/digest -dsn postgres://localhost/app -workers 8
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL DSN (default $DATABASE_URL)")
	workers := flag.Int("workers", 8, "concurrent workers")
	flag.Parse()
	if err := run(context.Background(), *dsn, *workers, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "digest:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn string, workers int, out io.Writer) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS digest_runs (run_date DATE PRIMARY KEY, sent_by INT NOT NULL)`); err != nil {
		return err
	}
	today := time.Now().UTC().Format("2006-01-02")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sent []int
	errs := make(chan error, workers)
	for w := 1; w <= workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var day time.Time
			err := db.QueryRowContext(ctx, `INSERT INTO digest_runs (run_date, sent_by) VALUES ($1, $2)
ON CONFLICT (run_date) DO NOTHING RETURNING run_date`, today, w).Scan(&day)
			if errors.Is(err, sql.ErrNoRows) {
				return // another worker has it
			}
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			sent = append(sent, w) // send the digest here
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Fprintf(out, "%d workers ran the digest for %s; %d sent it\n", workers, today, len(sent))
	if len(sent) > 1 {
		return fmt.Errorf("digest sent %d times", len(sent))
	}
	return nil
}
