package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// The benchmarks compare this package with what a PostgreSQL user would
// otherwise pick, on the test cluster, each in a database of its own, in
// alternating rounds (see lockbench.Interleave):
//
//	FENCELOCK_BENCH_ROUNDS=6 go test -run '^$' -bench 'Uncontended|Contended8' ./postgres/ | tee bench.txt
//	benchstat -col /impl -ignore /round bench.txt
//
//   - advisory: pg_advisory_lock / pg_advisory_unlock on one connection per
//     client (raw: no token, no expiry; a waiter blocks in the server).
//   - poller: a hand-written lease table, UPDATE ... WHERE owner IS NULL OR
//     expires < now() to take it, retried every 2ms while it is held.
//
// Round trips per acquire+release, uncontended: 2 for all three. Only
// fencelock issues a token, durable across restarts.

const benchTTL = 15 * time.Second

// lockImpl makes one client of one lock name in database dsn.
type lockImpl struct {
	name string
	new  func(b *testing.B, dsn, name string) lockbench.Contender
}

var impls = []lockImpl{
	{"fencelock", func(b *testing.B, dsn, name string) lockbench.Contender {
		// The schema is made before the run, as the poller's table is: a
		// deployment migrates once, not in the middle of contention (8
		// Lockers migrating at their first acquisitions stalled the first
		// grants for milliseconds, which were the contended run's p99).
		p := newPool(b, dsn)
		if err := Migrate(context.Background(), p, DefaultPrefix); err != nil {
			b.Fatal(err)
		}
		l, err := New(p, Config{}, backend.WithTTL(benchTTL))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		var ls *backend.Lease
		return lockbench.Contender{
			Lock:   func(ctx context.Context) (err error) { ls, err = l.Acquire(ctx, name); return err },
			Unlock: func(ctx context.Context) error { return ls.Release(ctx) },
		}
	}},
	{"advisory", func(b *testing.B, dsn, name string) lockbench.Contender {
		c := benchConn(b, dsn)
		return lockbench.Contender{
			Lock: func(ctx context.Context) error {
				_, err := c.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", name)
				return err
			},
			Unlock: func(ctx context.Context) error {
				var ok bool
				if err := c.QueryRow(ctx, "SELECT pg_advisory_unlock(hashtext($1))", name).Scan(&ok); err != nil {
					return err
				}
				if !ok {
					return errors.New("advisory lock was not held")
				}
				return nil
			},
		}
	}},
	{"poller", func(b *testing.B, dsn, name string) lockbench.Contender {
		c := benchConn(b, dsn)
		ctx := context.Background()
		if _, err := c.Exec(ctx, `CREATE TABLE IF NOT EXISTS leases (name text PRIMARY KEY, owner text, expires timestamptz);
			INSERT INTO leases VALUES ('`+name+`', NULL, NULL) ON CONFLICT DO NOTHING`); err != nil {
			b.Fatal(err)
		}
		owner := c.PgConn().ParameterStatus("server_version") + "/" + time.Now().String()
		return lockbench.Contender{
			Lock: func(ctx context.Context) error {
				for {
					tag, err := c.Exec(ctx, `UPDATE leases SET owner = $1, expires = now() + $2 * interval '1 ms'
						WHERE name = $3 AND (owner IS NULL OR expires < now())`, owner, benchTTL.Milliseconds(), name)
					if err != nil || tag.RowsAffected() == 1 {
						return err
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(2 * time.Millisecond):
					}
				}
			},
			Unlock: func(ctx context.Context) error {
				_, err := c.Exec(ctx, "UPDATE leases SET owner = NULL WHERE name = $1 AND owner = $2", name, owner)
				return err
			},
		}
	}},
}

// benchConn returns one connection of dsn, closed at cleanup.
func benchConn(b *testing.B, dsn string) *pgx.Conn {
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func interleave(b *testing.B, run func(b *testing.B, impl lockImpl)) {
	lockbench.Interleave(b, impls, func(i lockImpl) string { return i.name }, run)
}

// BenchmarkUncontended: one acquire+release of a free lock.
func BenchmarkUncontended(b *testing.B) {
	interleave(b, func(b *testing.B, impl lockImpl) {
		c := impl.new(b, srv.NewDatabase(b), "uncontended")
		lockbench.BenchUncontended(b, c, 20)
	})
}

// BenchmarkContended8: 8 contenders, each with its own client, acquire and
// release one lock in a loop; one op is one grant. Reported: grants/s, the
// handoff time (from a holder starting to release to the next grant) p50
// and p99, also in round trips and commits of the same run (rtt-us,
// commit-us, handoff-p50-rtt, handoff-p99-rtt), and each contender's share
// of the grants (min and max, in percent; 12.5 is even).
func BenchmarkContended8(b *testing.B) {
	const contenders = 8
	interleave(b, func(b *testing.B, impl lockImpl) {
		dsn := srv.NewDatabase(b)
		cs := make([]lockbench.Contender, contenders)
		for i := range cs {
			cs[i] = impl.new(b, dsn, "contended")
		}
		st := measureRoundTrips(b, newPool(b, dsn))
		r := lockbench.BenchContended(b, cs, 0)
		st.Report(b, r.Handoffs)
		share := func(n int) float64 { return 100 * float64(n) / float64(r.Grants) }
		b.ReportMetric(share(slices.Min(r.PerContender)), "min-share-%")
		b.ReportMetric(share(slices.Max(r.PerContender)), "max-share-%")
	})
}

// BenchmarkHandoff measures one handoff at a time, with nothing else going
// on (lockbench.BenchHandoff): a holder releases while one waiter waits;
// it reports the handoff (from the release's start to the waiter's
// grant), p50 and p99, in ms and in round trips, beside the round trip (a
// SELECT 1) and a write commit (an UPDATE) of the same run (rtt-us,
// commit-us), each request of which is sent after the same pause as a
// handoff. One op is one handoff.
//
// fencelock's waiter counts as queued once its row is in the waiters
// table; it then waits for the notification of its grant on its Locker's
// listener (opened at its first wait, an uncounted one): a handoff is the
// release, which grants it in the server, and one notification. The
// advisory waiter counts as queued once pg_locks shows its lock not
// granted (it blocks in the server, which grants it at the unlock). The
// poller queues nothing at the server (it tries every 2ms), so it counts
// as waiting from its start and is left the same pause before the
// release; its handoff is the release, up to one poll interval, and the
// UPDATE that takes the lock.
func BenchmarkHandoff(b *testing.B) {
	interleave(b, func(b *testing.B, impl lockImpl) {
		dsn := srv.NewDatabase(b)
		var pair [2]lockbench.Contender
		for i := range pair {
			pair[i] = impl.new(b, dsn, "handoff")
		}
		admin := newPool(b, dsn)
		var queued func(context.Context) (bool, error)
		switch impl.name {
		case "fencelock":
			queued = countAtLeast(admin, "SELECT count(*) FROM "+DefaultPrefix+"_waiters WHERE name = 'handoff'", 1)
		case "advisory":
			queued = countAtLeast(admin, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())", 1)
		}
		times := measureRoundTripsAfter(b, admin, 100, 100, lockbench.HandoffPause)
		lockbench.BenchHandoff(b, pair, queued, times)
	})
}

// countAtLeast returns a function that reports whether query, a count, on
// pool returns at least n.
func countAtLeast(pool *pgxpool.Pool, query string, n int64) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var c int64
		err := pool.QueryRow(ctx, query).Scan(&c)
		return c >= n, err
	}
}
