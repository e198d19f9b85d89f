package lockbench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend"
)

// Drain is the result of DrainQueue: how a queue of waiters on one lock was
// granted once its holder let go.
type Drain struct {
	Waiters  int             // how many waited
	Elapsed  time.Duration   // from the holder's release to the last grant
	Handoffs []time.Duration // from each release starting to the next grant, sorted
	// OutOfOrder counts the grants that did not go to the waiter the
	// server had queued next.
	OutOfOrder int
}

// waiterHolder is the holder identity of waiter i: Status lists waiters by
// it, in the order the server queued them.
func waiterHolder(i int) string { return "waiter-" + strconv.Itoa(i) }

// DrainQueue queues n waiters on the lock called name behind a holder,
// then releases the holder and lets the queue drain: each waiter releases
// as soon as it is granted. Waiters acquire through lockers in turn (a
// Locker serves many acquisitions at once; one per waiter would measure
// connections, not the queue). The queue's order is read with Status once
// all n are listed, each waiter named by its holder identity, and every
// grant is checked against it. opts apply to every acquisition (the
// holder identity excepted).
func DrainQueue(ctx context.Context, lockers []*backend.Locker, name string, n int, opts ...backend.Option) (Drain, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first, err := lockers[0].Acquire(ctx, name, opts...)
	if err != nil {
		return Drain{}, fmt.Errorf("holder: %w", err)
	}
	defer first.Release(context.Background())

	var (
		mu        sync.Mutex
		granted   []string // holder identities in grant order
		handoffs  []time.Duration
		releasing time.Time // when the last release started
		last      time.Time // the last grant
		failed    error     // the first failure: it cancels the rest
		wg        sync.WaitGroup
	)
	start := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := waiterHolder(i)
			ls, err := lockers[i%len(lockers)].Acquire(ctx, name, append(slices.Clone(opts), backend.WithHolder(who))...)
			now := time.Now()
			mu.Lock()
			if err != nil {
				if failed == nil {
					failed = fmt.Errorf("%s: %w", who, err)
				}
				mu.Unlock()
				cancel()
				return
			}
			granted = append(granted, who)
			handoffs = append(handoffs, now.Sub(releasing))
			last = now
			releasing = time.Now()
			mu.Unlock()
			if err := ls.Release(ctx); err != nil {
				mu.Lock()
				if failed == nil {
					failed = fmt.Errorf("%s: release: %w", who, err)
				}
				mu.Unlock()
				cancel()
			}
		}()
	}
	queue, err := enqueue(ctx, lockers[0], name, n, start)
	if err != nil {
		cancel()
		wg.Wait()
		if failed != nil {
			// A waiter's failure cancelled the enqueueing: the cause.
			return Drain{}, fmt.Errorf("%w (while queueing: %v)", failed, err)
		}
		return Drain{}, err
	}
	mu.Lock()
	releasing = time.Now()
	mu.Unlock()
	begin := releasing
	if err := first.Release(ctx); err != nil {
		cancel()
		wg.Wait()
		return Drain{}, fmt.Errorf("holder: release: %w", err)
	}
	wg.Wait()
	if failed != nil {
		return Drain{}, failed
	}
	d := Drain{Waiters: n, Elapsed: last.Sub(begin), Handoffs: handoffs}
	slices.Sort(d.Handoffs)
	for i, who := range granted {
		if queue[i] != who {
			d.OutOfOrder++
		}
	}
	return d, nil
}

// enqueue starts the n waiters with start and returns their holder
// identities in the order the server queued them. Where the backend's
// Status names waiters by their holder identity, they start all at once and
// the order is read once all are listed; where it does not (Redis keeps no
// holder identity), each starts once the one before is listed, so the
// order is the order they started in.
func enqueue(ctx context.Context, l *backend.Locker, name string, n int, start func(i int)) ([]string, error) {
	start(0)
	st, err := waitListed(ctx, l, name, 1)
	if err != nil {
		return nil, err
	}
	if st.Waiters[0].Holder == waiterHolder(0) {
		for i := 1; i < n; i++ {
			start(i)
		}
		if st, err = waitListed(ctx, l, name, n); err != nil {
			return nil, err
		}
		queue := make([]string, len(st.Waiters))
		for i, w := range st.Waiters {
			queue[i] = w.Holder
		}
		return queue, nil
	}
	queue := []string{waiterHolder(0)}
	for i := 1; i < n; i++ {
		start(i)
		if _, err := waitListed(ctx, l, name, i+1); err != nil {
			return nil, err
		}
		queue = append(queue, waiterHolder(i))
	}
	return queue, nil
}

// waitListed polls Status until at least n waiters are listed: at once at
// first, then backing off to every 100ms (a Status that reads each waiter's
// entry is not free).
func waitListed(ctx context.Context, l *backend.Locker, name string, n int) (backend.Status, error) {
	pause := time.Millisecond
	for {
		st, err := l.Status(ctx, name)
		if err != nil {
			return st, fmt.Errorf("status: %w", err)
		}
		if len(st.Waiters) >= n {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("%d of %d waiters queued: %w", len(st.Waiters), n, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// Report reports on b the drain time in ms and the handoff p50 and p99 in
// ms (drain-ms, handoff-p50-ms, handoff-p99-ms).
func (d Drain) Report(b *testing.B) {
	ms := func(x time.Duration) float64 { return float64(x) / float64(time.Millisecond) }
	b.ReportMetric(ms(d.Elapsed), "drain-ms")
	b.ReportMetric(ms(Percentile(d.Handoffs, 0.50)), "handoff-p50-ms")
	b.ReportMetric(ms(Percentile(d.Handoffs, 0.99)), "handoff-p99-ms")
}

// RequireFIFO runs DrainQueue and fails t if it fails or any grant went out
// of queue order. It logs the figures.
func RequireFIFO(t testing.TB, lockers []*backend.Locker, name string, n int, opts ...backend.Option) Drain {
	t.Helper()
	d, err := DrainQueue(context.Background(), lockers, name, n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d waiters drained in %v: handoff p50 %v, p99 %v", d.Waiters, d.Elapsed,
		Percentile(d.Handoffs, 0.50), Percentile(d.Handoffs, 0.99))
	if d.OutOfOrder > 0 {
		t.Fatalf("%d of %d grants out of queue order", d.OutOfOrder, d.Waiters)
	}
	return d
}

// BenchDrain is every adapter's BenchmarkDrain200/1000: it drains n waiters
// over lockers with DrainQueue, fails b if any grant went out of queue
// order, and reports the drain on b. One drain is one op.
func BenchDrain(b *testing.B, lockers []*backend.Locker, n int) Drain {
	b.Helper()
	d, err := DrainQueue(context.Background(), lockers, "queue", n)
	if err != nil {
		b.Fatal(err)
	}
	if d.OutOfOrder > 0 {
		b.Fatalf("%d grants out of queue order", d.OutOfOrder)
	}
	d.Report(b)
	return d
}
