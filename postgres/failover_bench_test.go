package postgres

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/lockbench"
	"github.com/fencelock/fencelock/internal/pganchor"
)

// BenchmarkFailover measures the time from a leader's end to the next
// leader leading (lockbench.BenchFailover), on the test cluster, each
// implementation in a database of its own, in alternating rounds, beside
// the elections a PostgreSQL user would otherwise build:
//
//   - advisory: pg_advisory_lock on one session per candidate (the server
//     queues the waiters and wakes the next at once), released by
//     pg_advisory_unlock; no TTL: the lock lasts as long as the session.
//   - poller: the lease table of internal/pganchor, taken with a 1s TTL
//     and retried every 2ms, and refreshed by its leader every third of
//     the TTL, as a fencelock lease is renewed.
//
// fencelock's leases have the same 1s TTL. Every candidate connects
// through a fault proxy of its own:
//
//	FENCELOCK_BENCH_ROUNDS=6 go test -run '^$' -bench Failover -benchtime 3x -timeout 30m ./postgres/ | tee failover.txt
//	benchstat -col /impl -ignore /round failover.txt
//
// end=resign: the leader resigns (Term.Resign, pg_advisory_unlock, the
// poller's release). end=kill: the proxy cuts the leader's connections (and
// fencelock's pool is closed), as the conformance harness's Crash does: the
// server sees them end, as when a process dies and its kernel closes its
// sockets. fencelock's and the poller's terms then last until their TTL
// runs out; the advisory lock ends with its session at once (a host that
// vanishes without closing its sockets would hold it until the server's
// TCP keepalive gives up, by default two hours). One op is one failover
// (-benchtime Nx: N failovers per sub-benchmark).
func BenchmarkFailover(b *testing.B) {
	lockbench.BenchFailovers(b, failoverImpls)
}

// failoverTTL is fencelock's and the poller's TTL.
const failoverTTL = time.Second

// failoverName is the election's name.
const failoverName = "leader"

var failoverImpls = []lockbench.FailoverImpl{
	{Name: "fencelock", Setup: func(b *testing.B) lockbench.Failover {
		dsn := srv.NewDatabase(b)
		admin := newPool(b, dsn)
		if err := Migrate(context.Background(), admin, DefaultPrefix); err != nil {
			b.Fatal(err)
		}
		observer, err := New(admin, Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = observer.Close() })
		f := failoverSetup(b, admin, failoverTTL)
		f.Waiting = func(ctx context.Context) (bool, error) {
			st, err := observer.Status(ctx, failoverName)
			return len(st.Waiters) > 0, err
		}
		f.New = func(tb testing.TB) lockbench.Candidate {
			proxy := failoverProxy(tb)
			pc, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				tb.Fatal(err)
			}
			pc.ConnConfig.Host, pc.ConnConfig.Port = failoverHostPort(tb, proxy)
			p, err := pgxpool.NewWithConfig(context.Background(), pc)
			if err != nil {
				tb.Fatal(err)
			}
			l, err := New(p, Config{}, backend.WithTTL(failoverTTL))
			if err != nil {
				tb.Fatal(err)
			}
			e, err := election.New(l)
			if err != nil {
				tb.Fatal(err)
			}
			return lockbench.ElectionCandidate(e, failoverName, "candidate",
				func() { proxy.Cut(); p.Close() },
				func() { _ = l.Close(); p.Close(); proxy.Close() })
		}
		return f
	}},
	{Name: "advisory", Setup: func(b *testing.B) lockbench.Failover {
		dsn := srv.NewDatabase(b)
		admin := newPool(b, dsn)
		f := failoverSetup(b, admin, 0)
		f.Waiting = func(ctx context.Context) (bool, error) {
			var n int
			err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks
				WHERE locktype = 'advisory' AND NOT granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
			return n > 0, err
		}
		f.New = func(tb testing.TB) lockbench.Candidate {
			proxy := failoverProxy(tb)
			conn := failoverConn(tb, dsn, proxy)
			c := pganchor.Advisory(conn, failoverKey)
			return lockbench.Candidate{
				Campaign: c.Lock,
				Resign:   c.Unlock,
				Kill:     proxy.Cut,
				Close:    func() { _ = conn.Close(context.Background()); proxy.Close() },
			}
		}
		return f
	}},
	{Name: "poller", Setup: func(b *testing.B) lockbench.Failover {
		dsn := srv.NewDatabase(b)
		admin := newPool(b, dsn)
		if err := pganchor.CreateLeaseTable(context.Background(), admin, "", failoverName); err != nil {
			b.Fatal(err)
		}
		f := failoverSetup(b, admin, failoverTTL)
		var owners int
		f.New = func(tb testing.TB) lockbench.Candidate {
			proxy := failoverProxy(tb)
			conn := failoverConn(tb, dsn, proxy)
			owners++
			return pollerCandidate(tb, conn, fmt.Sprintf("candidate-%d", owners), proxy)
		}
		return f
	}},
}

// failoverKey is the advisory lock's key.
const failoverKey = 16

// failoverSetup returns the Failover of an election in admin's database
// with the given TTL but for its candidates and waiting; its round trip is
// the contended benchmark's (SELECT 1).
func failoverSetup(b *testing.B, admin *pgxpool.Pool, ttl time.Duration) lockbench.Failover {
	return lockbench.Failover{
		TTL:       ttl,
		RoundTrip: func(b *testing.B) time.Duration { return measureRoundTrips(b, admin).RTT },
	}
}

// failoverProxy starts a fault proxy to the cluster, closed at cleanup.
func failoverProxy(tb testing.TB) *faultproxy.Proxy {
	proxy, err := faultproxy.Start(net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.Port())))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(proxy.Close)
	return proxy
}

func failoverHostPort(tb testing.TB, proxy *faultproxy.Proxy) (string, uint16) {
	host, port, err := net.SplitHostPort(proxy.Addr())
	if err != nil {
		tb.Fatal(err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		tb.Fatal(err)
	}
	return host, uint16(p)
}

// failoverConn returns one connection to dsn's database through proxy.
func failoverConn(tb testing.TB, dsn string, proxy *faultproxy.Proxy) *pgx.Conn {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	cc.Host, cc.Port = failoverHostPort(tb, proxy)
	conn, err := pgx.ConnectConfig(context.Background(), cc)
	if err != nil {
		tb.Fatal(err)
	}
	return conn
}

// pollerCandidate is a lease-table candidate (pganchor.Lease) on conn as
// owner: Campaign takes the lease, retrying every 2ms, and refreshes it
// every third of the TTL until Resign (which releases it) or Kill (which
// cuts proxy and stops the refreshes, as the process's death would).
func pollerCandidate(tb testing.TB, conn *pgx.Conn, owner string, proxy *faultproxy.Proxy) lockbench.Candidate {
	c, err := pganchor.Lease(conn, owner, pganchor.LeaseConfig{Name: failoverName, TTL: failoverTTL})
	if err != nil {
		tb.Fatal(err)
	}
	var (
		stop    context.CancelFunc
		stopped sync.WaitGroup
	)
	end := func() {
		stop()
		stopped.Wait()
	}
	return lockbench.Candidate{
		Campaign: func(ctx context.Context) error {
			if err := c.Lock(ctx); err != nil {
				return err
			}
			var rctx context.Context
			rctx, stop = context.WithCancel(context.Background())
			stopped.Add(1)
			go func() {
				defer stopped.Done()
				t := time.NewTicker(failoverTTL / 3)
				defer t.Stop()
				for {
					select {
					case <-rctx.Done():
						return
					case <-t.C:
						// Not under rctx: pgx closes a connection whose
						// statement's context ends.
						_, _ = conn.Exec(context.Background(), `UPDATE leases SET expires = now() + $3 * interval '1 millisecond'
							WHERE name = $1 AND owner = $2`, failoverName, owner, failoverTTL.Milliseconds())
					}
				}
			}()
			return nil
		},
		Resign: func(ctx context.Context) error {
			end()
			return c.Unlock(ctx)
		},
		Kill:  func() { proxy.Cut(); end() },
		Close: func() { _ = conn.Close(context.Background()); proxy.Close() },
	}
}
