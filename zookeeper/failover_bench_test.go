package zookeeper

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/internal/lockbench"
	"github.com/fencelock/fencelock/internal/zktest"
)

// BenchmarkFailover measures the time from a leader's end to the next
// leader leading (lockbench.BenchFailover), beside an election on
// go-zookeeper's zk.Lock (Campaign: Lock; Resign: Unlock) on the same
// server, in alternating rounds. The comparison is fair: both write one
// ephemeral sequential node per candidate in the same directory (zk.Lock's
// layout, which the adapter reads), both wait on a watch of the node ahead,
// and both candidates' sessions ask for the same 1s timeout (the test
// server's tickTime is 200ms: it grants 400ms to 120s as asked):
//
//	FENCELOCK_BENCH_ROUNDS=6 go test -run '^$' -bench Failover -benchtime 3x -timeout 30m ./zookeeper/ | tee failover.txt
//	benchstat -col /impl -ignore /round failover.txt
//
// end=resign: the leader resigns (Term.Resign, Unlock). end=kill: every
// connection of the leader's is cut by its own proxy, as the conformance
// harness's Crash does, so its session expires on the server after its
// timeout and its node goes with it. One op is one failover (-benchtime
// Nx: N failovers per sub-benchmark).
func BenchmarkFailover(b *testing.B) {
	lockbench.BenchFailovers(b, failoverImpls)
}

// failoverTimeout is both implementations' session timeout: the TTL.
const failoverTimeout = time.Second

var failoverImpls = []lockbench.FailoverImpl{
	{Name: "fencelock", Setup: func(b *testing.B) lockbench.Failover {
		f, prefix := failoverSetup(b)
		f.New = func(tb testing.TB) lockbench.Candidate {
			p := zktest.NewProxy(tb, srv.Addr())
			l, err := Dial(context.Background(), Config{Servers: []string{p.Addr()}, Prefix: prefix, SessionTimeout: failoverTimeout})
			if err != nil {
				tb.Fatal(err)
			}
			e, err := election.New(l)
			if err != nil {
				tb.Fatal(err)
			}
			// Close does not wait for a killed Locker's session close,
			// which waits in vain for the proxy.
			return lockbench.ElectionCandidate(e, failoverName, "candidate", p.Kill, func() { go l.Close() })
		}
		return f
	}},
	{Name: "zklock", Setup: func(b *testing.B) lockbench.Failover {
		f, prefix := failoverSetup(b)
		f.New = func(tb testing.TB) lockbench.Candidate {
			p := zktest.NewProxy(tb, srv.Addr())
			conn := zktest.ConnectTo(tb, p.Addr(), failoverTimeout)
			zl := zk.NewLock(conn, lockDir(prefix, failoverName), zk.WorldACL(zk.PermAll))
			return lockbench.Candidate{
				Campaign: func(context.Context) error { return zl.Lock() },
				Resign:   func(context.Context) error { return zl.Unlock() },
				Kill:     p.Kill,
				Close:    func() { go conn.Close() },
			}
		}
		return f
	}},
}

// failoverName is the election's name.
const failoverName = "leader"

// failoverSetup returns the Failover of an election under a prefix of its
// own (returned) but for its candidates: a waiter waits once the
// election's directory holds two lock nodes, and the round trip is the
// handoff benchmark's (an exists, each after a pause).
func failoverSetup(b *testing.B) (lockbench.Failover, string) {
	warmServer(b)
	prefix := fmt.Sprintf("/bench/%d", benchSeq.Add(1))
	admin := zktest.ConnectTo(b, srv.Addr(), benchSessionTimeout)
	dir := lockDir(prefix, failoverName)
	return lockbench.Failover{
		TTL: failoverTimeout,
		Waiting: func(context.Context) (bool, error) {
			kids, _, err := admin.Children(dir)
			if err == zk.ErrNoNode {
				return false, nil
			}
			n := 0
			for _, k := range kids {
				if _, ok := lockSeq(k); ok {
					n++
				}
			}
			return n >= 2, err
		},
		RoundTrip: func(b *testing.B) time.Duration {
			return measureServerTimesAfter(b, 100, lockbench.HandoffPause).RTT
		},
	}, prefix
}
