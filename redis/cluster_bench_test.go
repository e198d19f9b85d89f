package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
	"github.com/fencelock/fencelock/internal/redistest"
)

// The Redis Cluster benchmarks (issue 31, item 6): contention over many
// locks on clusters of 1, 2 and 3 masters, fencelock beside bsm/redislock
// on the same clusters in the same run; and one handoff at a time on a
// single server and on a cluster. Alternating rounds (lockbench.Interleave):
//
//	FENCELOCK_BENCH_ROUNDS=6 go test -run '^$' -bench '^BenchmarkClusterContended$' -benchtime 5000x -timeout 30m ./redis/ | tee cluster.txt
//	FENCELOCK_BENCH_ROUNDS=6 go test -run '^$' -bench '^BenchmarkClusterHandoff$' -benchtime 300x -timeout 30m ./redis/ | tee -a cluster.txt
//	benchstat -filter .name:ClusterContended -col /impl -row /masters -ignore /round cluster.txt
//	benchstat -filter .name:ClusterHandoff -col /topology -ignore /round cluster.txt
//
// Round trips are counted on the client (requests/grant, requests/handoff:
// every command or pipeline a contender's client sends, each one round
// trip; a pub/sub message is none). A contended grant of fencelock's is at
// least two: the acquire script that queues the waiter and the release
// script that grants it the lock and publishes its token; its waiter
// sends nothing while it waits. redislock's waiters poll (an Obtain every
// 2ms, as in the other benchmarks).

// Cluster sizes and load of BenchmarkClusterContended.
var scaleOutMasters = []int{1, 2, 3}

const (
	scaleOutNames   = 48 // locks, split evenly over the masters (48 = 2·24 = 3·16)
	scaleOutPerName = 4  // contenders per lock
	scaleOutClients = 8  // clients per implementation (processes, each with one Locker)
)

// requestCount is a go-redis hook that counts the requests a client sends:
// one per command and one per pipeline, each a round trip (a cluster
// client's redirections, which it follows inside one command, aside).
type requestCount struct{ n *atomic.Int64 }

func (h requestCount) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h requestCount) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h requestCount) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// countGauge is the Gauge of n's growth per op, reported as unit.
func countGauge(n *atomic.Int64, unit string) lockbench.Gauge {
	return func() func(*testing.B, int) {
		n0 := n.Load()
		return func(b *testing.B, ops int) {
			if ops > 0 {
				b.ReportMetric(float64(n.Load()-n0)/float64(ops), unit)
			}
		}
	}
}

// clusterClient returns a cluster client of c as Open builds one
// (ContextTimeoutEnabled), counting its requests in n, closed when b's
// run ends.
func clusterClient(b *testing.B, c *redistest.Cluster, n *atomic.Int64) *goredis.ClusterClient {
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	if n != nil {
		cc.AddHook(requestCount{n})
	}
	b.Cleanup(func() { _ = cc.Close() })
	return cc
}

// balancedNames returns n lock names whose slots are split evenly over
// c's masters (n must be a multiple of their number): a lock's slot is its
// name's, whatever the prefix.
func balancedNames(b *testing.B, c *redistest.Cluster, n int) []string {
	ctx := context.Background()
	owners, err := c.SlotMasters(ctx)
	if err != nil {
		b.Fatal(err)
	}
	const candidates = 2000
	p := c.Masters[0].NewClient(b).Pipeline()
	slots := make([]*goredis.IntCmd, candidates)
	for i := range slots {
		slots[i] = p.ClusterKeySlot(ctx, LockKey("x", "n"+strconv.Itoa(i)))
	}
	if _, err := p.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	per := n / len(c.Masters)
	count := map[string]int{}
	var names []string
	for i, s := range slots {
		if m := owners[s.Val()]; count[m] < per {
			count[m]++
			names = append(names, "n"+strconv.Itoa(i))
		}
	}
	if len(names) != n {
		b.Fatalf("%d of %d names balanced over %d masters", len(names), n, len(c.Masters))
	}
	return names
}

// scaleOutImpl is one implementation on one cluster size.
type scaleOutImpl struct {
	impl    string // fencelock or redislock
	cluster *redistest.Cluster
	names   []string
}

func (i scaleOutImpl) String() string {
	return fmt.Sprintf("%s/masters=%d", i.impl, len(i.cluster.Masters))
}

// BenchmarkClusterContended: scaleOutNames locks, each with
// scaleOutPerName contenders, all at once on a cluster of 1, 2 or 3
// masters (no replicas: they serve no requests), the names split evenly
// over the masters; the contenders share scaleOutClients cluster clients
// (one Locker each for fencelock), a lock's contenders each on another.
// One op is one grant, of any lock. Reported beside grants/s and the
// handoff (within one lock): the round trips per grant (requests/grant),
// the client's and the cluster's CPU per grant (client-cpu-us: this
// process; server-cpu-us: every node's; busiest-server-cpu-us: the
// busiest master's alone), the round trip (rtt-us, a PING to a master),
// and for fencelock the release notices and acquire scripts per grant.
//
// On one machine the clients and every master share the cores: grants/s
// grows with the masters only while a master's event loop is the
// bottleneck and cores are left; where the clients' CPU is (client-cpu-us
// times grants/s near the cores there are), it cannot. What more masters
// give a cluster whose clients run elsewhere shows in
// busiest-server-cpu-us: a master's core is full at 1e6 /
// busiest-server-cpu-us grants/s.
func BenchmarkClusterContended(b *testing.B) {
	var impls []scaleOutImpl
	for _, m := range scaleOutMasters {
		c := redistest.StartCluster(b, m, 0)
		names := balancedNames(b, c, scaleOutNames)
		impls = append(impls, scaleOutImpl{"fencelock", c, names}, scaleOutImpl{"redislock", c, names})
	}
	lockbench.Interleave(b, impls, scaleOutImpl.String, func(b *testing.B, impl scaleOutImpl) {
		prefix := benchPrefix()
		var requests atomic.Int64
		var drivers []*redisDriver
		lock := make([]func(ctx context.Context, name string) (func(context.Context) error, error), scaleOutClients)
		for k := range lock {
			cc := clusterClient(b, impl.cluster, &requests)
			switch impl.impl {
			case "fencelock":
				d, err := newDriver(cc, Config{Prefix: prefix}, nil)
				if err != nil {
					b.Fatal(err)
				}
				l, err := backend.New(d, backend.WithTTL(benchTTL))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = l.Close() })
				drivers = append(drivers, d)
				lock[k] = func(ctx context.Context, name string) (func(context.Context) error, error) {
					ls, err := l.Acquire(ctx, name)
					if err != nil {
						return nil, err
					}
					return ls.Release, nil
				}
			case "redislock":
				rl := redislock.New(cc)
				opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(2 * time.Millisecond)}
				lock[k] = func(ctx context.Context, name string) (func(context.Context) error, error) {
					lk, err := rl.Obtain(ctx, LockKey(prefix, name), benchTTL, opt)
					if err != nil {
						return nil, err
					}
					return lk.Release, nil
				}
			}
		}
		groups := make([][]lockbench.Contender, len(impl.names))
		for n, name := range impl.names {
			for j := range scaleOutPerName {
				acquire := lock[(n*scaleOutPerName+j)%scaleOutClients]
				var release func(context.Context) error
				groups[n] = append(groups[n], lockbench.Contender{
					Lock:   func(ctx context.Context) (err error) { release, err = acquire(ctx, name); return err },
					Unlock: func(ctx context.Context) error { return release(ctx) },
				})
			}
		}
		rtt := pingRTT(b, impl.cluster.Masters[0])
		r := lockbench.BenchContendedNames(b, groups, 0,
			countGauge(&requests, "requests/grant"), serverUsage(b, impl.cluster.Nodes()...),
			busiestUsage(b, impl.cluster.Masters...))
		b.ReportMetric(float64(rtt)/float64(time.Microsecond), "rtt-us")
		if impl.impl == "fencelock" {
			var wakeups, attempts int64
			for _, d := range drivers {
				wakeups += d.wakeups.Load()
				attempts += d.attempts.Load()
			}
			b.ReportMetric(float64(wakeups)/float64(r.Grants), "wakeups/grant")
			b.ReportMetric(float64(attempts)/float64(r.Grants), "attempts/grant")
		}
	})
}

// handoffTopology is where BenchmarkClusterHandoff's lock is.
type handoffTopology struct {
	name    string             // single, cluster or cluster-bus
	cluster *redistest.Cluster // nil: the benchmarks' single server
	// bus: the waiters' Lockers have no local subscriptions (see hub), so
	// that every release notice reaches them over the cluster bus.
	bus bool
}

// BenchmarkClusterHandoff is BenchmarkHandoff's one handoff at a time
// (lockbench.BenchHandoff), fencelock on the benchmarks' single server
// (topology=single) and on a Redis Cluster of 3 masters with a replica
// each (topology=cluster), each contender with its own client and Locker.
// In the cluster, the lock's name is one whose master is neither
// contender's wake channel's node (each Locker's own subscription is on
// the master of its channel's slot: a name and a Locker taken at random
// are on different masters 2 times in 3), so that the release's PUBLISH
// reaches the waiter over the cluster bus, or through the local
// subscription the waiter's Locker holds on the lock's master (see hub);
// topology=cluster-bus is the cluster without local subscriptions, as
// the adapter was before them. Reported beside the handoff:
// the round trip and a write to the lock's master (rtt-us, commit-us: for
// the cluster, a PING to that master and a SET through the cluster client
// of a key in the lock's slot), the handoff in those round trips, the
// requests per handoff of both contenders (requests/handoff: the waiter's
// acquire script that queues it, the holder's release script; the queue
// polling is not counted), and the servers' CPU per handoff
// (server-cpu-us: every node's, where a PUBLISH reaches every node).
func BenchmarkClusterHandoff(b *testing.B) {
	c := redistest.StartCluster(b, 3, 1)
	topologies := []handoffTopology{{"single", nil, false}, {"cluster", c, false}, {"cluster-bus", c, true}}
	lockbench.Interleave(b, topologies, func(t handoffTopology) string { return "fencelock/topology=" + t.name },
		func(b *testing.B, t handoffTopology) {
			ctx := context.Background()
			prefix := benchPrefix()
			var requests atomic.Int64
			var clients [2]Client
			var drivers [2]*redisDriver
			for i := range clients {
				if t.cluster == nil {
					c := benchClient(b, benchServer(b))
					c.AddHook(requestCount{&requests})
					clients[i] = c
				} else {
					clients[i] = clusterClient(b, t.cluster, &requests)
				}
				d, err := newDriver(clients[i], Config{Prefix: prefix}, nil)
				if err != nil {
					b.Fatal(err)
				}
				if t.bus {
					d.hub.masters = nil
				}
				drivers[i] = d
			}
			name := "handoff"
			var servers []*redistest.Server
			var admin goredis.Cmdable
			var times lockbench.ServerTimes
			if t.cluster == nil {
				s := benchServer(b)
				servers = []*redistest.Server{s}
				admin = benchClient(b, s)
				times = measureServerTimesAfter(b, s, 100, lockbench.HandoffPause)
			} else {
				servers = t.cluster.Nodes()
				name = crossNodeName(b, t.cluster, prefix, drivers)
				cc := clusterClient(b, t.cluster, nil)
				admin = cc
				master, err := cc.MasterForKey(ctx, keysOf(prefix, name).lock)
				if err != nil {
					b.Fatal(err)
				}
				commitKey := keysOf(prefix, name).lock + ":commit"
				median := func(req func() error) time.Duration { return lockbench.MedianOf(b, 100, lockbench.HandoffPause, req) }
				times = lockbench.ServerTimes{
					RTT:    median(func() error { return master.Ping(ctx).Err() }),
					Commit: median(func() error { return cc.Set(ctx, commitKey, "x", 0).Err() }),
				}
			}
			var pair [2]lockbench.Contender
			for i, d := range drivers {
				l, err := backend.New(d, backend.WithTTL(benchTTL))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = l.Close() })
				var ls *backend.Lease
				pair[i] = lockbench.Contender{
					Lock:   func(ctx context.Context) (err error) { ls, err = l.Acquire(ctx, name); return err },
					Unlock: func(ctx context.Context) error { return ls.Release(ctx) },
				}
			}
			queue := keysOf(prefix, name).queue
			queued := func(ctx context.Context) (bool, error) {
				n, err := admin.ZCard(ctx, queue).Result()
				return n >= 1, err
			}
			lockbench.BenchHandoff(b, pair, queued, times,
				countGauge(&requests, "requests/handoff"), serverUsage(b, servers...))
		})
}

// crossNodeName returns a lock name whose master in c is neither of the
// drivers' wake channel's node.
func crossNodeName(b *testing.B, c *redistest.Cluster, prefix string, drivers [2]*redisDriver) string {
	ctx := context.Background()
	owners, err := c.SlotMasters(ctx)
	if err != nil {
		b.Fatal(err)
	}
	node := c.Masters[0].NewClient(b)
	slotOwner := func(key string) string {
		slot, err := node.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			b.Fatal(err)
		}
		return owners[slot]
	}
	avoid := map[string]bool{}
	for _, d := range drivers {
		avoid[slotOwner(wakeChannel(prefix, d.id))] = true
	}
	for i := range 100 {
		name := "handoff-" + strconv.Itoa(i)
		if !avoid[slotOwner(keysOf(prefix, name).lock)] {
			return name
		}
	}
	b.Fatal("no name on a third master in 100")
	return ""
}
