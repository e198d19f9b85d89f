// Command jobclaim lets N workers claim pending jobs concurrently without any
// lock: the claim is a conditional UPDATE, so each job is claimed once.
//
//	UPDATE jobs SET status = 'claimed', claimed_by = $1
//	WHERE id = $2 AND status = 'pending' RETURNING id
//
// A worker that gets the row back owns the job; no row means someone else
// claimed it first.
//
//	go run ./examples/jobclaim -dsn postgres://localhost/app -jobs 100 -workers 8
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

	_ "github.com/jackc/pgx/v5/stdlib"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL DSN (default $DATABASE_URL)")
	jobs := flag.Int("jobs", 100, "jobs to create")
	workers := flag.Int("workers", 8, "concurrent workers")
	flag.Parse()
	if _, err := run(context.Background(), *dsn, *jobs, *workers, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jobclaim:", err)
		os.Exit(1)
	}
}

// run returns how many jobs each worker claimed.
func run(ctx context.Context, dsn string, jobs, workers int, out io.Writer) (map[int]int, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS jobs;
CREATE TABLE jobs (id INT PRIMARY KEY, status TEXT NOT NULL, claimed_by INT)`); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO jobs (id, status) SELECT g, 'pending' FROM generate_series(1, $1) g`, jobs); err != nil {
		return nil, err
	}
	claims := make([][]int, workers+1)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 1; w <= workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := 1; id <= jobs; id++ { // every worker tries every job
				var got int
				err := db.QueryRowContext(ctx, `UPDATE jobs SET status = 'claimed', claimed_by = $1
WHERE id = $2 AND status = 'pending' RETURNING id`, w, id).Scan(&got)
				if errors.Is(err, sql.ErrNoRows) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				claims[w] = append(claims[w], got) // run the job here
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	per := map[int]int{}
	seen := map[int]int{}
	total := 0
	for w, ids := range claims {
		for _, id := range ids {
			if prev, dup := seen[id]; dup {
				return nil, fmt.Errorf("job %d claimed by workers %d and %d", id, prev, w)
			}
			seen[id] = w
			per[w]++
			total++
		}
	}
	var pending int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM jobs WHERE status = 'pending'`).Scan(&pending); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "%d jobs, %d workers: %d claims, each job once, %d still pending\n", jobs, workers, total, pending)
	if total != jobs {
		return nil, fmt.Errorf("%d claims for %d jobs", total, jobs)
	}
	return per, nil
}
