package redis

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/redistest"
)

// The time without a grant after one fault, with wait_replicas=1 and a TTL
// of 2s, split into the topology's part (while no client could have had a
// grant: the primary its Sentinels or cluster name now had no replica that
// acknowledged a write) and the adapter's (the rest).

// gapTTL is the locks' TTL in the availability measurements.
const gapTTL = 2 * time.Second

// gapTopology is a Redis deployment the measurements fault.
type gapTopology struct {
	url string // with wait_replicas=1
	// primary is the server that serves the lock now, as the deployment
	// says (the Sentinels, the cluster's slot map); replica one of its
	// replicas.
	primary, replica func(ctx context.Context) (*redistest.Server, error)
	failover         func(ctx context.Context) error
	// original is the primary as started: its command line names no
	// primary, as a crashed primary's configuration does not.
	original *redistest.Server
	sentinel bool // Sentinels manage it
}

// sentinelGapTopology is a primary, replicas replicas and three Sentinels.
func sentinelGapTopology(tb testing.TB, replicas int) *gapTopology {
	s := redistest.StartSentinelsReplicas(tb, 3, replicas)
	return &gapTopology{
		url:     sentinelURL(s, "prefix=gap&wait_replicas=1"),
		primary: s.Master,
		replica: func(ctx context.Context) (*redistest.Server, error) {
			m, err := s.Master(ctx)
			if err != nil {
				return nil, err
			}
			for _, r := range append([]*redistest.Server{s.Primary, s.Replica}, s.More...) {
				if r == m {
					continue
				}
				c := goredis.NewClient(&goredis.Options{Addr: r.Addr(), MaxRetries: -1})
				v, err := redistest.InfoField(ctx, c, "master_port")
				_ = c.Close()
				if err == nil && m.Addr() == "127.0.0.1:"+v {
					return r, nil
				}
			}
			return nil, errors.New("no replica of the primary")
		},
		failover: func(ctx context.Context) error { _, err := s.Failover(ctx); return err },
		original: s.Primary,
		sentinel: true,
	}
}

// clusterGapTopology is a Redis Cluster of three masters with a replica
// each.
func clusterGapTopology(tb testing.TB) *gapTopology {
	c := redistest.StartCluster(tb, 3, 1)
	lock := keysOf("gap", "n").lock
	g := &gapTopology{
		url:     clusterURL(c, "prefix=gap&wait_replicas=1"),
		primary: func(ctx context.Context) (*redistest.Server, error) { return c.MasterOf(ctx, lock) },
	}
	g.replica = func(ctx context.Context) (*redistest.Server, error) {
		m, err := g.primary(ctx)
		if err != nil {
			return nil, err
		}
		return c.ReplicaOf(ctx, m)
	}
	g.failover = func(ctx context.Context) error {
		r, err := g.replica(ctx)
		if err != nil {
			return err
		}
		return c.Failover(ctx, r, false)
	}
	return g
}

// gapFault injects a fault into g and returns what undoes it.
type gapFault struct {
	name   string
	inject func(ctx context.Context, g *gapTopology) (undo func() error, err error)
}

// gapFaults are the faults, in the order a run injects them on one
// deployment: the replicas' first (a restarted replica names the primary
// it was started with), then the primary's.
var gapFaults = []gapFault{
	{"ReplicaPause", func(ctx context.Context, g *gapTopology) (func() error, error) {
		r, err := g.replica(ctx)
		if err != nil {
			return nil, err
		}
		return r.Resume, r.Pause()
	}},
	{"ReplicaKill", func(ctx context.Context, g *gapTopology) (func() error, error) {
		r, err := g.replica(ctx)
		if err != nil {
			return nil, err
		}
		r.Kill()
		return r.Restart, nil
	}},
	{"PrimaryKill", func(ctx context.Context, g *gapTopology) (func() error, error) {
		p, err := g.primary(ctx)
		if err != nil {
			return nil, err
		}
		if g.original != nil && p != g.original {
			return nil, errors.New("the primary is not the original one")
		}
		p.Kill()
		return p.Restart, nil
	}},
	// A primary killed, and restarted as a replica of the primary the
	// Sentinels name then (REPLICAOF at once, as a deployment's start
	// script that asks the Sentinels does), not left to the Sentinels.
	{"PrimaryKillRejoin", func(ctx context.Context, g *gapTopology) (func() error, error) {
		if !g.sentinel {
			return nil, errSkipFault
		}
		p, err := g.primary(ctx)
		if err != nil {
			return nil, err
		}
		p.Kill()
		return func() error {
			if err := p.Restart(); err != nil {
				return err
			}
			for {
				m, err := g.primary(ctx)
				if err == nil && m != p {
					host, port, _ := net.SplitHostPort(m.Addr())
					c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), MaxRetries: -1})
					defer c.Close()
					return c.ReplicaOf(ctx, host, port).Err()
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				time.Sleep(10 * time.Millisecond)
			}
		}, nil
	}},
	{"Failover", func(ctx context.Context, g *gapTopology) (func() error, error) {
		return func() error { return nil }, g.failover(ctx)
	}},
}

// errSkipFault: the fault does not apply to the deployment.
var errSkipFault = errors.New("not for this deployment")

// gapRun is one measurement's grants and probes.
type gapRun struct {
	mu     sync.Mutex
	grants []time.Time
	downs  [][2]time.Time // when the probes found no replica acknowledging, from the first such probe to the next good one
}

func (r *gapRun) granted(t time.Time) {
	r.mu.Lock()
	r.grants = append(r.grants, t)
	r.mu.Unlock()
}

// grantsSince counts the grants after t.
func (r *gapRun) grantsSince(t time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, g := range r.grants {
		if g.After(t) {
			n++
		}
	}
	return n
}

// fullRate returns when, after t, grants came at full rate: the first
// grant after t from which the next 20 came within 2s (three
// workers that hold for 10ms take about 20ms a grant), or zero if none
// has yet.
func (r *gapRun) fullRate(t time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, g := range r.grants {
		if g.After(t) && i+20 < len(r.grants) && r.grants[i+20].Sub(g) < 2*time.Second {
			return g
		}
	}
	return time.Time{}
}

// longest returns the longest time without a grant, the grant that ended
// it, and the longest time the probes found the deployment unable to
// grant, overlapping [from, to].
func (r *gapRun) longest(from, to time.Time) (gap time.Duration, end time.Time, down time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := time.Time{}
	for _, g := range r.grants {
		if !prev.IsZero() && g.After(from) && prev.Before(to) && g.Sub(prev) > gap {
			gap, end = g.Sub(prev), g
		}
		prev = g
	}
	for _, d := range r.downs {
		if d[1].After(from) && d[0].Before(to) {
			down = max(down, d[1].Sub(d[0]))
		}
	}
	return gap, end, down
}

// probe reports whether the primary g names now takes a write (a key in
// the lock's slot) that a replica acknowledges within 50ms. (WAIT answers
// whether the write failed or not: a restarted cluster master refuses
// writes with CLUSTERDOWN for 2s while its replica is in sync.)
func (g *gapTopology) probe(ctx context.Context, clients map[string]*goredis.Client) bool {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	m, err := g.primary(ctx)
	if err != nil {
		return false
	}
	c := clients[m.Addr()]
	if c == nil {
		c = goredis.NewClient(&goredis.Options{Addr: m.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
			ContextTimeoutEnabled: true})
		clients[m.Addr()] = c
	}
	p := c.Pipeline()
	incr := p.Incr(ctx, keysOf("gap", "n").lock+":probe")
	w := p.Do(ctx, "WAIT", 1, 50)
	_, _ = p.Exec(ctx)
	n, err := w.Int64()
	return incr.Err() == nil && err == nil && n >= 1
}

// measureGaps runs three workers that take and release lock "n" over
// g's URL, with wait_replicas=1 and TTL gapTTL, and injects each of
// faults in turn, undone after a TTL; report gets each fault's longest
// time without a grant, the deployment's part of it, and the time from
// the fault until grants came at full rate again.
func measureGaps(tb testing.TB, g *gapTopology, faults []gapFault, report func(f string, gap, down, slow time.Duration)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := backend.Open(ctx, g.url, backend.WithTTL(gapTTL))
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	run := &gapRun{}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run.work(ctx, l)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		run.watch(ctx, g)
	}()
	run.steady(tb, "start", 20)
	for _, f := range faults {
		t0 := time.Now()
		undo, err := f.inject(ctx, g)
		if errors.Is(err, errSkipFault) {
			continue
		}
		if err != nil {
			tb.Fatalf("%s: %v", f.name, err)
		}
		time.Sleep(gapTTL)
		if err := undo(); err != nil {
			tb.Fatalf("%s: undo: %v", f.name, err)
		}
		run.recovered(tb, f.name, t0)
		gap, end, down := run.longest(t0, time.Now())
		report(f.name, gap, down, run.fullRate(end.Add(-time.Nanosecond)).Sub(t0))
	}
}

// work is one of measureGaps' workers: until ctx ends, it takes lock "n"
// of l, notes the grant, holds it for 10ms and releases it.
func (r *gapRun) work(ctx context.Context, l *backend.Locker) {
	for ctx.Err() == nil {
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		ls, err := l.Acquire(actx, "n")
		acancel()
		if err != nil {
			time.Sleep(20 * time.Millisecond) // an unreachable backend fails fast: do not spin
			continue
		}
		r.granted(time.Now())
		time.Sleep(10 * time.Millisecond)
		_ = ls.Release(ctx)
	}
}

// watch probes g every 10ms until ctx ends (gapTopology.probe) and notes
// the times it was down: from the first failed probe to the next good one.
func (r *gapRun) watch(ctx context.Context, g *gapTopology) {
	clients := map[string]*goredis.Client{}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	var downSince time.Time
	for ctx.Err() == nil {
		start := time.Now()
		ok := g.probe(ctx, clients)
		switch {
		case !ok && downSince.IsZero():
			downSince = start
		case ok && !downSince.IsZero():
			r.mu.Lock()
			r.downs = append(r.downs, [2]time.Time{downSince, start})
			r.mu.Unlock()
			downSince = time.Time{}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// steady waits until grants flow: n grants after now, within a minute.
func (r *gapRun) steady(tb testing.TB, what string, n int) {
	tb.Helper()
	since := time.Now()
	deadline := since.Add(time.Minute)
	for r.grantsSince(since) < n {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: %d grants in a minute", what, r.grantsSince(since))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recovered waits, after fault what injected at t0 and undone, until
// grants flow, come at full rate after the longest gap since t0, and the
// probes have found the deployment up for a second.
func (r *gapRun) recovered(tb testing.TB, what string, t0 time.Time) {
	tb.Helper()
	r.steady(tb, what, 20)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, end, _ := r.longest(t0, time.Now())
		if !r.fullRate(end.Add(-time.Nanosecond)).IsZero() {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: grants not at full rate again within a minute", what)
		}
	}
	// The probes too must have found the deployment able to grant
	// again, and for a while.
	for {
		r.mu.Lock()
		n := len(r.downs)
		last := time.Time{}
		if n > 0 {
			last = r.downs[n-1][1]
		}
		r.mu.Unlock()
		if time.Since(last) > time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkFailoverGap measures, for each fault and deployment, the
// longest time without a grant (gap_s), the part of it while the
// deployment itself could grant nothing (down_s: the primary it names took
// no write a replica acknowledged), and the time from the fault until
// grants come at full rate again after that gap (slow_s), with wait_replicas=1, a TTL of
// 2s and three workers that take and release one lock. Each fault is
// undone after the TTL (a killed server restarted, a paused one resumed):
//
//	go test -run '^$' -bench FailoverGap -benchtime 1x -timeout 30m ./redis/
func BenchmarkFailoverGap(b *testing.B) {
	for _, topo := range []struct {
		name  string
		start func(testing.TB) *gapTopology
	}{
		{"Sentinel1Replica", func(tb testing.TB) *gapTopology { return sentinelGapTopology(tb, 1) }},
		{"Sentinel2Replicas", func(tb testing.TB) *gapTopology { return sentinelGapTopology(tb, 2) }},
		{"Cluster", clusterGapTopology},
	} {
		b.Run(topo.name, func(b *testing.B) {
			g := topo.start(b)
			res := map[string][3]time.Duration{}
			measureGaps(b, g, gapFaults, func(f string, gap, down, slow time.Duration) {
				res[f] = [3]time.Duration{gap, down, slow}
				b.Logf("%s %s: %.2fs without a grant, %.2fs of it the deployment's (adapter: %.2fs); full rate after %.2fs",
					topo.name, f, gap.Seconds(), down.Seconds(), (gap - down).Seconds(), slow.Seconds())
			})
			for _, f := range gapFaults {
				if _, ok := res[f.name]; !ok {
					continue
				}
				b.Run(f.name, func(b *testing.B) {
					b.ReportMetric(res[f.name][0].Seconds(), "gap_s")
					b.ReportMetric(res[f.name][1].Seconds(), "down_s")
					b.ReportMetric(res[f.name][2].Seconds(), "slow_s")
					b.ReportMetric(0, "ns/op")
				})
			}
		})
	}
}
