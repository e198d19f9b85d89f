package lockbench

import (
	"context"
	"slices"
	"testing"
	"time"
)

// HandoffPause is how long BenchHandoff lets a waiter settle once the
// server shows it queued (it reads the queue and sets its watch or
// subscription meanwhile; a poller polls), and the pause to leave before
// each request that measures the round trip and commit of a handoff
// benchmark (MedianOf): a server and client at rest answer slower than in
// a loop, and a handoff follows a pause.
const HandoffPause = 5 * time.Millisecond

// handoffWaitLimit bounds how long BenchHandoff waits for a waiter to show
// up at the server before the benchmark fails.
const handoffWaitLimit = time.Minute

// BenchHandoff measures b.N handoffs of one lock, one at a time with
// nothing else going on, between the two contenders of pair, which take
// turns as holder and waiter. For each, the waiter starts to acquire;
// once queued reports it queued at the server (polled every millisecond)
// and HandoffPause has passed, the holder releases. The handoff is from
// the start of the release to the waiter's grant. queued nil stands for
// an implementation that queues nothing at the server (a poller, which
// tries at once and then every few milliseconds): its waiter is left
// HandoffPause from its start. The benchmark's timer is stopped while the
// waiter queues and settles. Two handoffs before the measured ones, one
// with each contender waiting, are not counted: a waiter's first wait may
// open its Locker's subscription or listener. One op is one handoff: use
// -benchtime Nx (a timed run would grow b.N from the timed part alone, a
// fraction of each op's time).
//
// It reports the handoff p50 and p99 in ms (handoff-p50-ms,
// handoff-p99-ms) and, with times (which should be measured with
// HandoffPause before each request), the round trip and commit and the
// handoffs in round trips (see ServerTimes.Report), and gauges per
// handoff, measured over the measured handoffs (each with its waiter's
// wait from its start, and the pauses).
func BenchHandoff(b *testing.B, pair [2]Contender, queued func(context.Context) (bool, error), times ServerTimes, gauges ...Gauge) {
	b.StopTimer()
	ctx := context.Background()
	if err := pair[0].Lock(ctx); err != nil {
		b.Fatal(err)
	}
	const warmup = 2
	handoffs := make([]time.Duration, 0, b.N)
	var stops []func(*testing.B, int)
	for i := range warmup + b.N {
		if i == warmup {
			for _, g := range gauges {
				stops = append(stops, g())
			}
		}
		holder, waiter := pair[i%2], pair[(i+1)%2]
		type grant struct {
			err error
			at  time.Time
		}
		granted := make(chan grant, 1)
		go func() {
			err := waiter.Lock(ctx)
			granted <- grant{err, time.Now()}
		}()
		awaitQueued(b, queued)
		if i == warmup {
			b.ResetTimer()
		}
		b.StartTimer()
		start := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		g := <-granted
		if g.err != nil {
			b.Fatal(g.err)
		}
		// To the grant, which may come before the release's reply.
		d := g.at.Sub(start)
		b.StopTimer()
		if i >= warmup {
			handoffs = append(handoffs, d)
		}
	}
	for _, stop := range stops {
		stop(b, b.N)
	}
	if err := pair[(warmup+b.N)%2].Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	slices.Sort(handoffs)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(Percentile(handoffs, 0.5)), "handoff-p50-ms")
	b.ReportMetric(ms(Percentile(handoffs, 0.99)), "handoff-p99-ms")
	times.Report(b, handoffs)
}

// awaitQueued waits until queued reports the waiter queued (at once if
// queued is nil), and then HandoffPause; it fails b after
// handoffWaitLimit.
func awaitQueued(b *testing.B, queued func(context.Context) (bool, error)) {
	if queued != nil {
		ctx, cancel := context.WithTimeout(context.Background(), handoffWaitLimit)
		defer cancel()
		for {
			ok, err := queued(ctx)
			if err == nil && !ok {
				err = ctx.Err()
			}
			if err != nil {
				b.Fatalf("waiting for the waiter to queue: %v", err)
			}
			if ok {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(HandoffPause)
}
