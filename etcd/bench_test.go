package etcd

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// The benchmarks compare this package with etcd's concurrency.Mutex on one
// embedded server (with fsync, as a real member, unless -etcd.nofsync), in
// alternating rounds (see lockbench.Interleave):
//
//	FENCELOCK_BENCH_ROUNDS=6 go test -run '^$' -bench . -benchtime 3s ./etcd/ | tee bench.txt
//	benchstat -col /impl -ignore /round bench.txt
//
// Round trips per acquire+release, uncontended: fencelock 2 Txns (lease from
// the pool), Mutex 1 Txn + 1 Delete (session created outside the loop).
var benchNoFsync = flag.Bool("etcd.nofsync", false, "benchmarks: run the embedded etcd without fsync")

var (
	benchOnce sync.Once
	benchSrv  *etcdtest.Server
	benchErr  error
)

// benchServer returns the server all benchmarks of the run share; TestMain
// closes it.
func benchServer(b *testing.B) *etcdtest.Server {
	benchOnce.Do(func() {
		var opts []etcdtest.Option
		if !*benchNoFsync {
			opts = append(opts, etcdtest.WithFsync())
		}
		benchSrv, benchErr = etcdtest.StartServer("", opts...)
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchSrv
}

func closeBenchServer() {
	if benchSrv != nil {
		benchSrv.Close()
	}
}

// lockImpl is one lock implementation under benchmark: a new contender
// returns lock and unlock functions with their own client.
type lockImpl struct {
	name string
	new  func(b *testing.B, s *etcdtest.Server, prefix, lockName string) (lock, unlock func(context.Context) error)
}

var impls = []lockImpl{
	{"fencelock", func(b *testing.B, s *etcdtest.Server, prefix, name string) (func(context.Context) error, func(context.Context) error) {
		c := benchClient(b, s)
		l, err := New(c, Config{Prefix: prefix}, backend.WithTTL(15*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		var ls *backend.Lease
		return func(ctx context.Context) (err error) {
				ls, err = l.Acquire(ctx, name)
				return err
			}, func(ctx context.Context) error {
				return ls.Release(ctx)
			}
	}},
	{"mutex", func(b *testing.B, s *etcdtest.Server, prefix, name string) (func(context.Context) error, func(context.Context) error) {
		c := benchClient(b, s)
		sess, err := concurrency.NewSession(c, concurrency.WithTTL(15))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sess.Close() })
		m := concurrency.NewMutex(sess, prefix+"/"+name)
		return m.Lock, m.Unlock
	}},
}

func benchClient(b *testing.B, s *etcdtest.Server) *clientv3.Client {
	c, err := s.Client()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

var benchSeq atomic.Int64

// BenchmarkUncontended measures one acquire+release of a free lock, with the
// code fencelock bench runs (internal/lockbench).
func BenchmarkUncontended(b *testing.B) {
	s := benchServer(b)
	interleave(b, func(b *testing.B, impl lockImpl) {
		prefix := fmt.Sprintf("bench/%d", benchSeq.Add(1))
		lock, unlock := impl.new(b, s, prefix, "uncontended")
		// Warm up: connections, and for fencelock the lease pool.
		lockbench.BenchUncontended(b, lockbench.Contender{Lock: lock, Unlock: unlock}, 10)
	})
}

// BenchmarkContended8 runs 8 contenders, each with its own client, that
// acquire and release one lock in a loop. One op is one grant. It reports
// grants/s and the handoff time (from the moment a holder starts releasing
// to the next grant), p50 and p99, in ms and in round trips measured just
// before (see measureRoundTrips), with the round trip and write commit times.
func BenchmarkContended8(b *testing.B) {
	const contenders = 8
	s := benchServer(b)
	interleave(b, func(b *testing.B, impl lockImpl) {
		prefix := fmt.Sprintf("bench/%d", benchSeq.Add(1))
		cs := make([]lockbench.Contender, contenders)
		for i := range cs {
			cs[i].Lock, cs[i].Unlock = impl.new(b, s, prefix, "contended")
		}
		base := measureRoundTrips(b, benchClient(b, s), prefix+"/rtt")
		r := lockbench.BenchContended(b, cs, 0)
		base.Report(b, r.Handoffs)
	})
}

// measureRoundTrips measures, on key with c, the round trip (a serializable
// Range: one round trip to the member, served from its memory) and a write
// commit (a Put: raft, WAL fsync, apply) in the same run as a benchmark:
// the medians of 300 Ranges and 100 Puts, back to back, after a few of
// each to warm the connection.
func measureRoundTrips(b *testing.B, c *clientv3.Client, key string) lockbench.ServerTimes {
	return measureRoundTripsAfter(b, c, key, 300, 100, 0)
}

// measureRoundTripsAfter is measureRoundTrips with gets Ranges and puts
// Puts, each sent after pause.
func measureRoundTripsAfter(b *testing.B, c *clientv3.Client, key string, gets, puts int, pause time.Duration) lockbench.ServerTimes {
	ctx := context.Background()
	put := func() error { _, err := c.Put(ctx, key, "x"); return err }
	get := func() error { _, err := c.Get(ctx, key, clientv3.WithSerializable()); return err }
	median := func(n int, pause time.Duration, op func() error) time.Duration {
		return lockbench.MedianOf(b, n, pause, op)
	}
	median(10, 0, put)
	median(10, 0, get)
	return lockbench.ServerTimes{RTT: median(gets, pause, get), Commit: median(puts, pause, put)}
}

// BenchmarkHandoff measures one handoff at a time, with nothing else going
// on (lockbench.BenchHandoff): a holder releases while one waiter, queued
// (the lock's directory holds its key beside the holder's) and watching,
// waits; it reports the handoff (from the release's start to the waiter's
// grant), p50 and p99, in ms and in round trips, beside the round trip (a
// serializable Range) and a write commit (a Put) of the same run (rtt-us,
// commit-us), each request of which is sent after the same pause as a
// handoff. The physical limit is one commit (the release's delete) and one
// event delivery (the watch event the delete sends the waiter). fencelock
// and concurrency.Mutex queue alike: each waiter writes a key under the
// lock's directory and watches its predecessor's. One op is one handoff.
func BenchmarkHandoff(b *testing.B) {
	s := benchServer(b)
	interleave(b, func(b *testing.B, impl lockImpl) {
		prefix := fmt.Sprintf("bench/%d", benchSeq.Add(1))
		var pair [2]lockbench.Contender
		for i := range pair {
			pair[i].Lock, pair[i].Unlock = impl.new(b, s, prefix, "handoff")
		}
		admin := benchClient(b, s)
		dir := nameDir(prefix, "handoff")
		times := measureRoundTripsAfter(b, admin, prefix+"/rtt", 100, 100, lockbench.HandoffPause)
		lockbench.BenchHandoff(b, pair, func(ctx context.Context) (bool, error) {
			r, err := admin.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return false, err
			}
			return r.Count >= 2, nil
		}, times)
	})
}

// BenchmarkRoundTrip measures one serializable Range of a key on the
// benchmarks' server: the round trip the handoff figures are counted in.
func BenchmarkRoundTrip(b *testing.B) {
	c := benchClient(b, benchServer(b))
	ctx := context.Background()
	key := fmt.Sprintf("bench/%d/rtt", benchSeq.Add(1))
	if _, err := c.Put(ctx, key, "x"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.Get(ctx, key, clientv3.WithSerializable()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDriverUncontended is BenchmarkUncontended on the driver alone,
// without the backend package's Locker and Lease around it: the difference
// is the shared layer's cost (renewal goroutine, contexts, bookkeeping).
func BenchmarkDriverUncontended(b *testing.B) {
	s := benchServer(b)
	d := newDriver(benchClient(b, s), fmt.Sprintf("bench/%d", benchSeq.Add(1)), false)
	defer d.Shutdown(context.Background())
	ctx := context.Background()
	req := driver.Request{Name: "uncontended", TTL: 15 * time.Second, Lost: func(error) {}}
	var inLock, inUnlock time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		dl, _, err := d.NewLease(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := dl.Lock(ctx, true); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := dl.Release(ctx, false); err != nil {
			b.Fatal(err)
		}
		inLock += t1.Sub(t0)
		inUnlock += time.Since(t1)
		n++
	}
	b.ReportMetric(float64(inLock.Microseconds())/float64(n), "acquire-us")
	b.ReportMetric(float64(inUnlock.Microseconds())/float64(n), "release-us")
}

// interleave runs run for each impl in alternating rounds.
func interleave(b *testing.B, run func(b *testing.B, impl lockImpl)) {
	lockbench.Interleave(b, impls, func(i lockImpl) string { return i.name }, run)
}
