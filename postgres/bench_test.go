package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/internal/lockbench"
)

// measureRoundTrips measures, on pool, the median round trip (SELECT 1)
// and write commit (an UPDATE of one row, committed).
func measureRoundTrips(b *testing.B, pool *pgxpool.Pool) lockbench.ServerTimes {
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS bench_commit (k int PRIMARY KEY, v bigint); INSERT INTO bench_commit VALUES (1, 0) ON CONFLICT DO NOTHING"); err != nil {
		b.Fatal(err)
	}
	sel := func() error { _, err := pool.Exec(ctx, "SELECT 1"); return err }
	upd := func() error { _, err := pool.Exec(ctx, "UPDATE bench_commit SET v = v + 1 WHERE k = 1"); return err }
	median := func(n int, op func() error) time.Duration {
		d, err := lockbench.MedianOf(n, 0, op)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	median(10, sel)
	median(10, upd)
	return lockbench.ServerTimes{RTT: median(300, sel), Commit: median(100, upd)}
}

// BenchmarkRoundTrip measures one SELECT 1 on the test server: the round
// trip the handoff figures are counted in.
func BenchmarkRoundTrip(b *testing.B) {
	pool := newPool(b, srv.DSN())
	ctx := context.Background()
	for b.Loop() {
		if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
			b.Fatal(err)
		}
	}
}
