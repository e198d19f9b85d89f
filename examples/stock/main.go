// Command stock sells the last items of a product to concurrent buyers
// without any lock: the decrement carries its own condition.
//
//	UPDATE inventory SET stock = stock - 1
//	WHERE product_id = $1 AND stock > 0 RETURNING stock
//
// A buyer who gets a row bought one; no row means sold out. Stock never goes
// negative and the number sold equals the initial stock.
//
//	go run ./examples/stock -dsn postgres://localhost/app -stock 10 -buyers 50
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
	"sync/atomic"

	_ "github.com/jackc/pgx/v5/stdlib"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL DSN (default $DATABASE_URL)")
	stock := flag.Int("stock", 10, "initial stock")
	buyers := flag.Int("buyers", 50, "concurrent buyers")
	flag.Parse()
	if err := run(context.Background(), *dsn, *stock, *buyers, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "stock:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn string, stock, buyers int, out io.Writer) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS inventory (product_id TEXT PRIMARY KEY, stock INT NOT NULL CHECK (stock >= 0))`); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO inventory VALUES ('widget', $1) ON CONFLICT (product_id) DO UPDATE SET stock = EXCLUDED.stock`, stock); err != nil {
		return err
	}
	var sold, soldOut atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, buyers)
	for b := 0; b < buyers; b++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var left int
			err := db.QueryRowContext(ctx, `UPDATE inventory SET stock = stock - 1
WHERE product_id = $1 AND stock > 0 RETURNING stock`, "widget").Scan(&left)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				soldOut.Add(1)
			case err != nil:
				errs <- err
			default:
				sold.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	var left int
	if err := db.QueryRowContext(ctx, `SELECT stock FROM inventory WHERE product_id = 'widget'`).Scan(&left); err != nil {
		return err
	}
	fmt.Fprintf(out, "initial stock %d, %d buyers: sold %d, sold out for %d, stock left %d\n", stock, buyers, sold.Load(), soldOut.Load(), left)
	if want := min(stock, buyers); int(sold.Load()) != want || left != stock-want {
		return fmt.Errorf("sold %d, left %d: want sold %d", sold.Load(), left, want)
	}
	return nil
}
