package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/internal/lockbench"
)

// measureRoundTrips measures, on pool, the median round trip (SELECT 1)
// and write commit (an UPDATE of one row, committed) of 300 and 100
// requests, back to back.
func measureRoundTrips(b *testing.B, pool *pgxpool.Pool) lockbench.ServerTimes {
	return measureRoundTripsAfter(b, pool, 300, 100, 0)
}

// measureRoundTripsAfter is measureRoundTrips with sels SELECT 1 and upds
// UPDATEs, each sent after pause, after a few of each back to back to warm
// the pool.
func measureRoundTripsAfter(b *testing.B, pool *pgxpool.Pool, sels, upds int, pause time.Duration) lockbench.ServerTimes {
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS bench_commit (k int PRIMARY KEY, v bigint); INSERT INTO bench_commit VALUES (1, 0) ON CONFLICT DO NOTHING"); err != nil {
		b.Fatal(err)
	}
	sel := func() error { _, err := pool.Exec(ctx, "SELECT 1"); return err }
	upd := func() error { _, err := pool.Exec(ctx, "UPDATE bench_commit SET v = v + 1 WHERE k = 1"); return err }
	median := func(n int, pause time.Duration, op func() error) time.Duration {
		return lockbench.MedianOf(b, n, pause, op)
	}
	median(10, 0, sel)
	median(10, 0, upd)
	return lockbench.ServerTimes{RTT: median(sels, pause, sel), Commit: median(upds, pause, upd)}
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
