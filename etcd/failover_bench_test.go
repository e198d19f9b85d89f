package etcd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// BenchmarkFailover measures the time from a leader's end to the next
// leader leading (lockbench.BenchFailover), beside etcd's
// concurrency.Election on the same server (the benchmarks' embedded member,
// with fsync), in alternating rounds; both keep one key per candidate under
// the same directory (prefix/name/<lease id>), and both leases have a 2s
// TTL (etcd's minimum with the default election settings) renewed every
// third of it:
//
//	FENCELOCK_BENCH_ROUNDS=6 go test -run '^$' -bench Failover -benchtime 3x -timeout 30m ./etcd/ | tee failover.txt
//	benchstat -col /impl -ignore /round failover.txt
//
// end=resign: the leader resigns (fencelock Term.Resign, Election.Resign).
// end=kill: the leader's client is closed without resigning, as the
// conformance harness's Crash does: its key stays until its lease expires.
// One op is one failover (-benchtime Nx: N failovers per sub-benchmark).
func BenchmarkFailover(b *testing.B) {
	lockbench.BenchFailovers(b, failoverImpls)
}

// failoverTTL is the TTL of both implementations' leases: etcd's minimum.
const failoverTTL = 2 * time.Second

var failoverImpls = []lockbench.FailoverImpl{
	{Name: "fencelock", Setup: func(b *testing.B) lockbench.Failover {
		s := benchServer(b)
		prefix := fmt.Sprintf("bench/%d", benchSeq.Add(1))
		f := failoverSetup(b, prefix, "leader")
		f.New = func(tb testing.TB) lockbench.Candidate {
			c, err := s.Client()
			if err != nil {
				tb.Fatal(err)
			}
			l, err := New(c, Config{Prefix: prefix}, backend.WithTTL(failoverTTL))
			if err != nil {
				tb.Fatal(err)
			}
			e, err := election.New(l)
			if err != nil {
				tb.Fatal(err)
			}
			return lockbench.ElectionCandidate(e, "leader", "candidate",
				func() { _ = c.Close() },
				func() { _ = l.Close(); _ = c.Close() })
		}
		return f
	}},
	{Name: "election", Setup: func(b *testing.B) lockbench.Failover {
		s := benchServer(b)
		prefix := fmt.Sprintf("bench/%d", benchSeq.Add(1))
		f := failoverSetup(b, prefix, "leader")
		f.New = func(tb testing.TB) lockbench.Candidate {
			c, err := s.Client()
			if err != nil {
				tb.Fatal(err)
			}
			sess, err := concurrency.NewSession(c, concurrency.WithTTL(int(failoverTTL/time.Second)))
			if err != nil {
				tb.Fatal(err)
			}
			e := concurrency.NewElection(sess, strings.TrimSuffix(nameDir(prefix, "leader"), "/"))
			return lockbench.Candidate{
				Campaign: func(ctx context.Context) error { return e.Campaign(ctx, "candidate") },
				Resign:   e.Resign,
				Kill:     func() { _ = c.Close() }, // the session's lease is not revoked
				Close:    func() { _ = sess.Close(); _ = c.Close() },
			}
		}
		return f
	}},
}

// failoverSetup returns the Failover of election name under prefix but for
// its candidates: a waiter waits once the directory holds two keys (both
// implementations write one per candidate), and the round trip is the
// handoff benchmarks' (a serializable Range).
func failoverSetup(b *testing.B, prefix, name string) lockbench.Failover {
	admin := benchClient(b, benchServer(b))
	dir := nameDir(prefix, name)
	return lockbench.Failover{
		TTL: failoverTTL,
		Waiting: func(ctx context.Context) (bool, error) {
			resp, err := admin.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return false, err
			}
			return resp.Count >= 2, nil
		},
		RoundTrip: func(b *testing.B) time.Duration {
			return measureRoundTrips(b, admin, prefix+"/rtt").RTT
		},
	}
}
