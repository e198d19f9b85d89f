package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/postgres"
)

// A lock in PostgreSQL: the holder sends its fencing token with every
// write, and a second acquisition waits for the release's notification.
// The database's URL comes from $FENCELOCK_POSTGRES_URL (e.g.
// postgres://app@127.0.0.1:5432/app); the package's tests point it at the
// server they start. The Locker creates its tables on first use.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("FENCELOCK_POSTGRES_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close() // postgres.New never closes the pool it is given

	locker, err := postgres.New(pool, postgres.Config{Prefix: "example"}, backend.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	first, err := locker.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.TryAcquire(ctx, "nightly-report")
	fmt.Println("try while held:", errors.Is(err, backend.ErrNotAcquired))

	granted := make(chan *backend.Lease)
	go func() {
		second, err := locker.Acquire(ctx, "nightly-report")
		if err != nil {
			log.Fatal(err)
		}
		granted <- second
	}()
	time.Sleep(50 * time.Millisecond) // let it wait
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	second := <-granted
	fmt.Println("second token greater:", second.Token() > first.Token())

	// The lease row, as a same-transaction fencing check reads it.
	var owned bool
	err = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM example_locks WHERE name = $1 AND token = $2
		AND owner IS NOT NULL AND expires > clock_timestamp())`, "nightly-report", int64(second.Token())).Scan(&owned)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("lease row carries the token:", owned)
	if err := second.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// try while held: true
	// second token greater: true
	// lease row carries the token: true
}

// The migration SQL, for users who run their migrations themselves (then
// set Config.NoMigrate, or migrate=false in a URL).
func ExampleSchema() {
	sql, err := postgres.Schema("locks")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sql[:len("BEGIN;")])
	// Output: BEGIN;
}
