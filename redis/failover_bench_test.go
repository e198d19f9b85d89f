package redis

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/internal/lockbench"
	"github.com/fencelock/fencelock/internal/redistest"
)

// BenchmarkFailover measures the time from a leader's end to the next
// leader leading (lockbench.BenchFailover), beside the election people
// build on bsm/redislock, which has none: each candidate retries Obtain
// every 2ms (LinearBackoff, as in the other benchmarks) until it gets the
// key, and its leader Refreshes the key every third of the TTL, as a
// fencelock lease is renewed. Both keys have a 1s TTL. The comparison is
// fair for the time to a new leader and for nothing else: the pollers load
// the server with a request per waiter every 2ms, lead in no order, and
// their terms carry no token. Same server, alternating rounds:
//
//	FENCELOCK_BENCH_ROUNDS=6 go test -run '^$' -bench Failover -benchtime 3x -timeout 30m ./redis/ | tee failover.txt
//	benchstat -col /impl -ignore /round failover.txt
//
// end=resign: the leader resigns (Term.Resign; redislock: Release). end=kill:
// the leader's client is closed without releasing, as the conformance
// harness's Crash does, and a redislock leader's refreshes stop with it.
// One op is one failover (-benchtime Nx: N failovers per sub-benchmark).
func BenchmarkFailover(b *testing.B) {
	lockbench.BenchFailovers(b, failoverImpls)
}

// failoverTTL is both implementations' TTL.
const failoverTTL = time.Second

// failoverName is the election's name.
const failoverName = "leader"

var failoverImpls = []lockbench.FailoverImpl{
	{Name: "fencelock", Setup: func(b *testing.B) lockbench.Failover {
		s := benchServer(b)
		prefix := benchPrefix()
		f := failoverSetup(b, s)
		observer := failoverLocker(b, s, prefix)
		f.Waiting = func(ctx context.Context) (bool, error) {
			st, err := observer.Status(ctx, failoverName)
			return len(st.Waiters) > 0, err
		}
		f.New = func(tb testing.TB) lockbench.Candidate {
			c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
			l, err := New(c, Config{Prefix: prefix}, backend.WithTTL(failoverTTL))
			if err != nil {
				tb.Fatal(err)
			}
			e, err := election.New(l)
			if err != nil {
				tb.Fatal(err)
			}
			return lockbench.ElectionCandidate(e, failoverName, "candidate",
				func() { _ = c.Close() },
				func() { _ = l.Close(); _ = c.Close() })
		}
		return f
	}},
	{Name: "redislock", Setup: func(b *testing.B) lockbench.Failover {
		s := benchServer(b)
		key := LockKey(benchPrefix(), failoverName)
		f := failoverSetup(b, s)
		f.New = func(tb testing.TB) lockbench.Candidate {
			c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
			return pollingCandidate(redislock.New(c), key, func() { _ = c.Close() })
		}
		return f
	}},
}

// failoverLocker returns a Locker of its own client under prefix, with
// the failover TTL, closed at cleanup.
func failoverLocker(b *testing.B, s *redistest.Server, prefix string) *backend.Locker {
	l, err := New(benchClient(b, s), Config{Prefix: prefix}, backend.WithTTL(failoverTTL))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// failoverSetup returns the Failover of both implementations but for its
// candidates and waiting: the TTL, and the round trip of the contended
// benchmark (a PING).
func failoverSetup(b *testing.B, s *redistest.Server) lockbench.Failover {
	return lockbench.Failover{
		TTL:       failoverTTL,
		RoundTrip: func(b *testing.B) time.Duration { return pingRTT(b, s) },
	}
}

// pollingCandidate is a redislock candidate for key: Campaign obtains it,
// retrying every 2ms, and refreshes it every third of the TTL until Resign
// (which releases it) or Kill (which stops the refreshes, as the process's
// death would, and calls kill).
func pollingCandidate(rl *redislock.Client, key string, kill func()) lockbench.Candidate {
	var (
		lk      *redislock.Lock
		stop    context.CancelFunc
		stopped sync.WaitGroup
	)
	end := func() {
		stop()
		stopped.Wait()
	}
	return lockbench.Candidate{
		Campaign: func(ctx context.Context) (err error) {
			lk, err = rl.Obtain(ctx, key, failoverTTL, &redislock.Options{RetryStrategy: redislock.LinearBackoff(2 * time.Millisecond)})
			if err != nil {
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
						_ = lk.Refresh(rctx, failoverTTL, nil)
					}
				}
			}()
			return nil
		},
		Resign: func(ctx context.Context) error {
			end()
			return lk.Release(ctx)
		},
		Kill:  func() { kill(); end() },
		Close: kill,
	}
}
