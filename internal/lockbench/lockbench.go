// Package lockbench measures lock implementations one way for both the Go
// benchmarks beside the anchor libraries and the fencelock bench command:
// uncontended acquire+release latency, and contended grants/s with the
// handoff time from a release to the next grant. The Report methods put
// the results on a testing.B under the same metric names everywhere.
package lockbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Contender is one client of a lock: Lock blocks until it holds it, Unlock
// releases it. Each contender should have its own connection.
type Contender struct {
	Lock   func(context.Context) error // blocks until the contender holds the lock
	Unlock func(context.Context) error // releases it
}

// Uncontended is the result of RunUncontended.
type Uncontended struct {
	Ops     int             // acquire-release pairs made
	Elapsed time.Duration   // the run's wall time
	Acquire []time.Duration // per op, sorted
	Release []time.Duration // per op, sorted
	Total   []time.Duration // acquire+release per op, sorted
}

// RunUncontended acquires and releases a free lock ops times with c, after
// warmup rounds that are not counted. progress, if not nil, is called after
// each op with the number done.
func RunUncontended(ctx context.Context, c Contender, warmup, ops int, progress func(done int)) (Uncontended, error) {
	for range warmup {
		if err := cycle(ctx, c); err != nil {
			return Uncontended{}, err
		}
	}
	r := Uncontended{Ops: ops, Acquire: make([]time.Duration, 0, ops), Release: make([]time.Duration, 0, ops), Total: make([]time.Duration, 0, ops)}
	begin := time.Now()
	for i := range ops {
		t0 := time.Now()
		if err := c.Lock(ctx); err != nil {
			return r, err
		}
		t1 := time.Now()
		if err := c.Unlock(ctx); err != nil {
			return r, err
		}
		t2 := time.Now()
		r.Acquire = append(r.Acquire, t1.Sub(t0))
		r.Release = append(r.Release, t2.Sub(t1))
		r.Total = append(r.Total, t2.Sub(t0))
		if progress != nil {
			progress(i + 1)
		}
	}
	r.Elapsed = time.Since(begin)
	slices.Sort(r.Acquire)
	slices.Sort(r.Release)
	slices.Sort(r.Total)
	return r, nil
}

func cycle(ctx context.Context, c Contender) error {
	if err := c.Lock(ctx); err != nil {
		return err
	}
	return c.Unlock(ctx)
}

// Contended is the result of RunContended.
type Contended struct {
	Grants       int             // grants made, all contenders together
	Elapsed      time.Duration   // the run's wall time
	Handoffs     []time.Duration // from a holder starting to release to the next grant, sorted
	PerContender []int           // grants per contender
}

// GrantsPerSecond is the grant rate over the whole run.
func (r Contended) GrantsPerSecond() float64 { return float64(r.Grants) / r.Elapsed.Seconds() }

// ErrOverlap is returned when two contenders held the lock at once.
var ErrOverlap = errors.New("lockbench: two holders at once")

// RunContended runs the contenders against one lock, each acquiring and
// releasing in a loop, until grants grants were made. It checks that no two
// contenders hold at once. progress, if not nil, is called after each grant
// with the number made.
func RunContended(ctx context.Context, cs []Contender, grants int, progress func(done int)) (Contended, error) {
	return RunContendedHold(ctx, cs, grants, 0, progress)
}

// RunContendedHold is RunContended with each holder keeping the lock for
// hold (a sleep) before it releases: the critical section of real users,
// during which waiters can prepare their turn.
func RunContendedHold(ctx context.Context, cs []Contender, grants int, hold time.Duration, progress func(done int)) (Contended, error) {
	return RunContendedNames(ctx, [][]Contender{cs}, grants, hold, progress)
}

// RunContendedNames is RunContendedHold over many locks at once: each
// group of contenders contends for a lock of its own, all groups at the
// same time, until grants grants were made over all of them together. It
// checks that no two contenders of a group hold at once; a handoff is
// from a holder starting to release to the next grant in its group.
// PerContender lists the contenders group after group.
func RunContendedNames(ctx context.Context, groups [][]Contender, grants int, hold time.Duration, progress func(done int)) (Contended, error) {
	var (
		made     atomic.Int64
		mu       sync.Mutex
		handoffs []time.Duration
		failed   error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if failed == nil {
			failed = err
		}
		mu.Unlock()
	}
	n := 0
	for _, g := range groups {
		n += len(g)
	}
	r := Contended{PerContender: make([]int, n)}
	begin := time.Now()
	i := 0
	for _, g := range groups {
		var (
			releasing atomic.Int64 // UnixNano when the group's last holder started releasing; 0: none yet
			holders   atomic.Int32
		)
		for _, c := range g {
			count := &r.PerContender[i]
			i++
			wg.Add(1)
			go func() {
				defer wg.Done()
				var local []time.Duration
				defer func() {
					mu.Lock()
					handoffs = append(handoffs, local...)
					mu.Unlock()
				}()
				for {
					if err := c.Lock(ctx); err != nil {
						fail(err)
						return
					}
					now := time.Now()
					if holders.Add(1) != 1 {
						fail(ErrOverlap)
					}
					if at := releasing.Load(); at != 0 {
						local = append(local, now.Sub(time.Unix(0, at)))
					}
					n := made.Add(1)
					*count++
					if progress != nil {
						progress(int(n))
					}
					if hold > 0 {
						time.Sleep(hold)
					}
					holders.Add(-1)
					releasing.Store(time.Now().UnixNano())
					if err := c.Unlock(ctx); err != nil {
						fail(err)
						return
					}
					if n >= int64(grants) {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	r.Elapsed = time.Since(begin)
	r.Grants = int(made.Load())
	slices.Sort(handoffs)
	r.Handoffs = handoffs
	return r, failed
}

// Percentile returns the p-quantile (0 <= p <= 1) of sorted, or 0 if it is
// empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// Mean returns the mean of ds, or 0 if it is empty.
func Mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// Report reports on b the mean acquire and release times, in µs
// (acquire-us, release-us).
func (r Uncontended) Report(b *testing.B) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(Mean(r.Acquire)), "acquire-us")
	b.ReportMetric(us(Mean(r.Release)), "release-us")
}

// Report reports on b the grants per second and the handoff p50 and p99,
// in ms (grants/s, handoff-p50-ms, handoff-p99-ms).
func (r Contended) Report(b *testing.B) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(r.GrantsPerSecond(), "grants/s")
	b.ReportMetric(ms(Percentile(r.Handoffs, 0.50)), "handoff-p50-ms")
	b.ReportMetric(ms(Percentile(r.Handoffs, 0.99)), "handoff-p99-ms")
}

// A Gauge measures, per op, something a benchmark reports beside its
// latency: it is called just before the timed ops, and the function it
// returns just after them, with their number, to report on b.
type Gauge func() (stop func(b *testing.B, ops int))

// ClientUsage is the Gauge of this process's own cost per op: its CPU time,
// user and system, in µs (client-cpu-us), and its voluntary context
// switches (client-vcsw: a thread that blocked, as one that waits for a
// reply longer than the scheduler spins does). On a machine whose cores
// the server shares, both add to the latency. It reports nothing where the
// system does not count them.
func ClientUsage() (stop func(b *testing.B, ops int)) {
	cpu0, vcsw0, ok := processUsage()
	return func(b *testing.B, ops int) {
		cpu1, vcsw1, _ := processUsage()
		if !ok || ops == 0 {
			return
		}
		b.ReportMetric(float64(cpu1-cpu0)/float64(time.Microsecond)/float64(ops), "client-cpu-us")
		b.ReportMetric(float64(vcsw1-vcsw0)/float64(ops), "client-vcsw")
	}
}

// BenchUncontended runs RunUncontended for b.N ops after warmup ones,
// and reports the result on b, with ClientUsage and gauges measured over
// the b.N ops alone. The benchmark's time includes the warmup.
func BenchUncontended(b *testing.B, c Contender, warmup int, gauges ...Gauge) Uncontended {
	b.ResetTimer()
	ctx := context.Background()
	if _, err := RunUncontended(ctx, c, warmup, 0, nil); err != nil {
		b.Fatal(err)
	}
	stops := make([]func(*testing.B, int), 0, len(gauges)+1)
	for _, g := range append([]Gauge{ClientUsage}, gauges...) {
		stops = append(stops, g())
	}
	r, err := RunUncontended(ctx, c, 0, b.N, nil)
	for _, stop := range stops {
		stop(b, r.Ops)
	}
	if err != nil {
		b.Fatal(err)
	}
	r.Report(b)
	return r
}

// BenchContended runs RunContendedHold for b.N grants, timing only the
// run, and reports the result on b.
func BenchContended(b *testing.B, cs []Contender, hold time.Duration) Contended {
	b.ResetTimer()
	r, err := RunContendedHold(context.Background(), cs, b.N, hold, nil)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	r.Report(b)
	return r
}

// BenchContendedNames runs RunContendedNames for b.N grants, timing only
// the run, and reports the result on b, with ClientUsage and gauges per
// grant, measured over the run.
func BenchContendedNames(b *testing.B, groups [][]Contender, hold time.Duration, gauges ...Gauge) Contended {
	stops := make([]func(*testing.B, int), 0, len(gauges)+1)
	for _, g := range append([]Gauge{ClientUsage}, gauges...) {
		stops = append(stops, g())
	}
	b.ResetTimer()
	r, err := RunContendedNames(context.Background(), groups, b.N, hold, nil)
	b.StopTimer()
	for _, stop := range stops {
		stop(b, r.Grants)
	}
	if err != nil {
		b.Fatal(err)
	}
	r.Report(b)
	return r
}

// RoundsEnv names the environment variable that sets how many rounds
// Interleave runs (default 1).
const RoundsEnv = "FENCELOCK_BENCH_ROUNDS"

// Interleave runs run once per implementation and round, as the
// sub-benchmark round=R/impl=NAME (NAME from name), alternating the
// implementations within each round and their order between rounds (ABBA),
// so that a machine or server that drifts during the run (a JIT warming
// up, a noisy neighbour) weighs on all of them alike. go test -count
// repeats each sub-benchmark back to back, which would measure one
// implementation entirely before the next; use rounds instead, and pool
// them with benchstat -col /impl -ignore /round.
//
// The number of rounds comes from the environment variable RoundsEnv.
func Interleave[I any](b *testing.B, impls []I, name func(I) string, run func(b *testing.B, impl I)) {
	rounds, err := Rounds()
	if err != nil {
		b.Fatal(err)
	}
	for round := range rounds {
		for i := range impls {
			impl := impls[i]
			if round%2 == 1 {
				impl = impls[len(impls)-1-i]
			}
			b.Run(fmt.Sprintf("round=%d/impl=%s", round, name(impl)), func(b *testing.B) { run(b, impl) })
		}
	}
}

// Rounds returns the number of rounds set in the environment variable
// RoundsEnv: 1 if it is unset.
func Rounds() (int, error) {
	v := os.Getenv(RoundsEnv)
	if v == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("lockbench: %s=%q: want a positive number of rounds", RoundsEnv, v)
	}
	return n, nil
}
