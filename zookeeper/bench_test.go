package zookeeper

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
	"github.com/fencelock/fencelock/internal/zktest"
)

// Benchmarks beside go-zookeeper's zk.Lock on the same server in the same
// run, in alternating rounds (see lockbench.Interleave):
//
//	FENCELOCK_BENCH_ROUNDS=8 go test -run '^$' -bench . ./zookeeper/ | tee zk.txt
//	benchstat -col /impl -ignore /round zk.txt

const benchSessionTimeout = 15 * time.Second

var benchSeq atomic.Int64

type lockImpl struct {
	name string
	new  func(b testing.TB, prefix, lockName string) (lock, unlock func(context.Context) error)
}

var impls = []lockImpl{
	{"fencelock", func(b testing.TB, prefix, name string) (func(context.Context) error, func(context.Context) error) {
		l, err := Dial(context.Background(), Config{Servers: []string{srv.Addr()}, Prefix: prefix, SessionTimeout: benchSessionTimeout})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		var ls *backend.Lease
		return func(ctx context.Context) (err error) {
				ls, err = l.Acquire(ctx, name)
				if err == nil && ls.Token() == 0 {
					err = fmt.Errorf("no token")
				}
				return err
			}, func(ctx context.Context) error {
				return ls.Release(ctx)
			}
	}},
	{"zklock", func(b testing.TB, prefix, name string) (func(context.Context) error, func(context.Context) error) {
		conn := zktest.ConnectTo(b, srv.Addr(), benchSessionTimeout)
		zl := zk.NewLock(conn, lockDir(prefix, name), zk.WorldACL(zk.PermAll))
		return func(context.Context) error { return zl.Lock() },
			func(context.Context) error { return zl.Unlock() }
	}},
}

// warmGrants is how many grants warmServer makes with each impl, per round.
const warmGrants = 2000

var warmOnce sync.Once

// warmServer runs contended rounds of every impl, alternating, before the
// first benchmark measures: a server whose JIT compiles as it goes (the
// JVM's default C2) gets faster for a minute or so, and without this the
// impl measured first pays for that.
func warmServer(b *testing.B) {
	warmOnce.Do(func() {
		for range 3 {
			for _, impl := range impls {
				prefix := fmt.Sprintf("/bench/%d", benchSeq.Add(1))
				cs := make([]lockbench.Contender, 8)
				for i := range cs {
					cs[i].Lock, cs[i].Unlock = impl.new(b, prefix, "warm")
				}
				if _, err := lockbench.RunContended(context.Background(), cs, warmGrants, nil); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkUncontended measures one acquire+release of a free lock
// (fencelock also returns the czxid token).
func BenchmarkUncontended(b *testing.B) {
	interleave(b, func(b *testing.B, impl lockImpl) {
		warmServer(b)
		prefix := fmt.Sprintf("/bench/%d", benchSeq.Add(1))
		lock, unlock := impl.new(b, prefix, "uncontended")
		lockbench.BenchUncontended(b, lockbench.Contender{Lock: lock, Unlock: unlock}, 10)
	})
}

// BenchmarkContended8 runs 8 contenders, each with its own connection, that
// acquire and release one lock in a loop. One op is one grant. It reports
// grants/s and the handoff time (from the moment a holder starts releasing
// to the next grant), p50 and p99, in ms and in round trips of the same
// run (handoff-p50-rtt, handoff-p99-rtt: see measureServerTimes, whose rtt-us and
// commit-us it reports too), and what each grant cost the server: requests
// received and watch events sent (counted with mntr, so they include the
// few pings of idle sessions).
func BenchmarkContended8(b *testing.B) { benchContended(b, 0) }

func benchContended(b *testing.B, hold time.Duration) {
	const contenders = 8
	interleave(b, func(b *testing.B, impl lockImpl) {
		warmServer(b)
		prefix := fmt.Sprintf("/bench/%d", benchSeq.Add(1))
		cs := make([]lockbench.Contender, contenders)
		for i := range cs {
			cs[i].Lock, cs[i].Unlock = impl.new(b, prefix, "contended")
		}
		times := measureServerTimes(b)
		count := packetCounter(b)
		r := lockbench.BenchContended(b, cs, hold)
		requests, events := count(r.Grants)
		b.ReportMetric(requests, "server-requests/grant")
		b.ReportMetric(events, "server-events/grant")
		times.Report(b, r.Handoffs)
	})
}

// measureServerTimes measures the round trip (an exists of an existing
// node) and the write commit (a setData: logged and committed) on the
// server, on an ephemeral node of its own, back to back (300 of each), as
// the requests of a contended run follow each other.
func measureServerTimes(b testing.TB) lockbench.ServerTimes {
	return measureServerTimesAfter(b, 300, 0)
}

// measureServerTimesAfter measures the round trip and the write commit with
// samples requests of each kind, each sent after a pause, as the requests
// of a handoff that follows a pause are.
func measureServerTimesAfter(b testing.TB, samples int, pause time.Duration) lockbench.ServerTimes {
	b.Helper()
	conn := zktest.ConnectTo(b, srv.Addr(), benchSessionTimeout)
	node, err := conn.Create("/fencelock-bench-commit-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		b.Fatal(err)
	}
	median := func(req func() error) time.Duration { return lockbench.MedianOf(b, samples, pause, req) }
	return lockbench.ServerTimes{
		RTT:    median(func() error { _, _, err := conn.Exists(node); return err }),
		Commit: median(func() error { _, err := conn.Set(node, nil, -1); return err }),
	}
}

// BenchmarkHandoff measures one handoff at a time, with nothing else going
// on (lockbench.BenchHandoff): a holder releases while one waiter, queued
// (its node listed in the lock's directory) and watching, waits; it
// reports the handoff (from the release's start to the waiter's grant),
// p50 and p99, in ms and in round trips, beside the round trip and a write
// commit of the same run (rtt-us, commit-us), each request of which is
// sent after the same pause as a handoff (a server and client at rest
// answer slower than in a loop). The physical limit is one commit (the
// release's delete) and one event delivery (the watch event the delete
// sends the waiter). One op is one handoff.
func BenchmarkHandoff(b *testing.B) {
	interleave(b, func(b *testing.B, impl lockImpl) {
		warmServer(b)
		prefix := fmt.Sprintf("/bench/%d", benchSeq.Add(1))
		var pair [2]lockbench.Contender
		for i := range pair {
			pair[i].Lock, pair[i].Unlock = impl.new(b, prefix, "handoff")
		}
		admin := zktest.ConnectTo(b, srv.Addr(), benchSessionTimeout)
		dir := lockDir(prefix, "handoff")
		times := measureServerTimesAfter(b, 100, lockbench.HandoffPause)
		lockbench.BenchHandoff(b, pair, func(context.Context) (bool, error) {
			kids, _, err := admin.Children(dir)
			return len(kids) >= 2, err
		}, times)
	})
}

// BenchmarkRoundTrip is one exists on the same server: the unit of the
// handoff figures (handoff p50 within one write commit and one event
// delivery).
func BenchmarkRoundTrip(b *testing.B) {
	conn := zktest.ConnectTo(b, srv.Addr(), benchSessionTimeout)
	for b.Loop() {
		if _, _, err := conn.Exists("/"); err != nil {
			b.Fatal(err)
		}
	}
}

// interleave runs run for each impl in alternating rounds.
func interleave(b *testing.B, run func(b *testing.B, impl lockImpl)) {
	lockbench.Interleave(b, impls, func(i lockImpl) string { return i.name }, run)
}

// BenchmarkContended8Hold is BenchmarkContended8 with each holder keeping
// the lock for 1ms, a short critical section: waiters then prepare their
// turn while the holder holds, as they would in use.
func BenchmarkContended8Hold(b *testing.B) {
	benchContended(b, time.Millisecond)
}
