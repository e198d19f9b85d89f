package lockbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend"
)

// Held is what holding many leases at once costs one process: the live heap
// and the goroutines they add, per lease, measured after a forced GC once
// the goroutine count has settled.
type Held struct {
	Leases             int     // how many leases were held
	HeapPerLease       float64 // bytes
	GoroutinesPerLease float64 // goroutines added per lease
}

// HeldEnv names the environment variable that sets how many leases the
// held-lease tests hold (their own default when unset).
const HeldEnv = "FENCELOCK_HELD_LEASES"

// HeldLeases returns the number of leases set in HeldEnv, or def if unset.
func HeldLeases(def int) (int, error) {
	v := os.Getenv(HeldEnv)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("lockbench: %s=%q: want a positive number of leases", HeldEnv, v)
	}
	return n, nil
}

// heldParallel is how many acquisitions MeasureHeld runs at once.
const heldParallel = 16

// MeasureHeld acquires n locks of distinct names (prefix-0, prefix-1, ...)
// through l with opts, and measures the heap and goroutines they add while
// all are held; then it releases them all and fails if the goroutine count
// does not come back to where it was (a leak). A few acquisitions are made
// and released first, so that connections and shared watchers opened on
// first use are not counted.
func MeasureHeld(ctx context.Context, l *backend.Locker, prefix string, n int, opts ...backend.Option) (Held, error) {
	for i := range 4 {
		ls, err := l.Acquire(ctx, fmt.Sprintf("%s-warm-%d", prefix, i), opts...)
		if err != nil {
			return Held{}, fmt.Errorf("warm-up: %w", err)
		}
		if err := ls.Release(ctx); err != nil {
			return Held{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	baseG := settledGoroutines(ctx)
	baseHeap := liveHeap()

	leases := make([]*backend.Lease, n)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan int)
	)
	for range min(heldParallel, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ls, err := l.Acquire(ctx, fmt.Sprintf("%s-%d", prefix, i), opts...)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				leases[i] = ls
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()

	var h Held
	if err := errors.Join(errs...); err != nil {
		releaseAll(leases)
		return h, fmt.Errorf("acquire: %d of %d failed: %w", len(errs), n, errs[0])
	}
	heldG := settledGoroutines(ctx)
	heap := liveHeap()
	runtime.KeepAlive(leases)
	h = Held{
		Leases:             n,
		HeapPerLease:       float64(int64(heap)-int64(baseHeap)) / float64(n),
		GoroutinesPerLease: float64(heldG-baseG) / float64(n),
	}
	for _, ls := range leases {
		if err := ls.Err(); err != nil {
			releaseAll(leases)
			return h, fmt.Errorf("a lease was lost while held: %w", err)
		}
	}
	if err := releaseAll(leases); err != nil {
		return h, fmt.Errorf("release: %w", err)
	}
	// Released leases must leave nothing running behind them.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseG+heldSlack && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > baseG+heldSlack {
		return h, fmt.Errorf("%d goroutines after releasing %d leases, %d before acquiring them", g, n, baseG)
	}
	return h, nil
}

// heldSlack is how many goroutines more than before the leases may be left
// after they are released: a client's own connection or timer goroutines
// come and go independently of the leases.
const heldSlack = 8

func releaseAll(leases []*backend.Lease) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan *backend.Lease)
	)
	for range heldParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ls := range next {
				if err := ls.Release(context.Background()); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, ls := range leases {
		if ls != nil {
			next <- ls
		}
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// settledGoroutines returns the goroutine count once it has stayed the same
// over several samples 100ms apart (5s at most): goroutines that start
// after a delay (a watch set up once a hold outlasts a short threshold) are
// counted.
func settledGoroutines(ctx context.Context) int {
	const stableSamples = 5
	g, same := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(5 * time.Second); same < stableSamples && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(100 * time.Millisecond)
		if n := runtime.NumGoroutine(); n == g {
			same++
		} else {
			g, same = n, 0
		}
	}
	return g
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Report reports on b the heap and goroutines per held lease
// (heap-B/lease, goroutines/lease).
func (h Held) Report(b *testing.B) {
	b.ReportMetric(h.HeapPerLease, "heap-B/lease")
	b.ReportMetric(h.GoroutinesPerLease, "goroutines/lease")
}

// MaxGoroutinesPerLease is the most goroutines a held lease may cost on any
// backend; RequireHeld fails above it.
const MaxGoroutinesPerLease = 1.0

// MaxHeapPerLease is the most heap, in bytes, a held lease may keep where an
// adapter's test checks it (CheckHeld).
const MaxHeapPerLease = 4096

// HeldTTL is the TTL of the held-lease tests and benchmarks: long enough
// that no renewal runs while the leases are counted.
const HeldTTL = 30 * time.Second

// RequireHeld runs MeasureHeld and fails t if it fails or a held lease
// costs more than MaxGoroutinesPerLease goroutines. It logs the figures.
func RequireHeld(t testing.TB, l *backend.Locker, prefix string, n int, opts ...backend.Option) Held {
	t.Helper()
	h, err := MeasureHeld(context.Background(), l, prefix, n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d leases held: %.0f B of heap and %.3f goroutines per lease", h.Leases, h.HeapPerLease, h.GoroutinesPerLease)
	if h.GoroutinesPerLease > MaxGoroutinesPerLease {
		t.Fatalf("%.3f goroutines per held lease, want at most %v", h.GoroutinesPerLease, MaxGoroutinesPerLease)
	}
	return h
}

// CheckHeld is every adapter's TestHeldLeaseCost: it holds HeldLeases(2000)
// leases through l and fails as RequireHeld does, and also if a held lease
// costs more than maxGoroutines goroutines (below one: none of its own,
// only what a busy client may start meanwhile) or, if checkHeap, more than
// MaxHeapPerLease bytes of heap.
func CheckHeld(t *testing.T, l *backend.Locker, maxGoroutines float64, checkHeap bool) {
	t.Helper()
	n, err := HeldLeases(2000)
	if err != nil {
		t.Fatal(err)
	}
	h := RequireHeld(t, l, "held", n)
	if h.GoroutinesPerLease > maxGoroutines {
		t.Errorf("%.3f goroutines per held lease, want at most %v", h.GoroutinesPerLease, maxGoroutines)
	}
	if checkHeap && h.HeapPerLease > MaxHeapPerLease {
		t.Errorf("%.0f B of heap per held lease, want at most %d", h.HeapPerLease, MaxHeapPerLease)
	}
}

// BenchHeld is every adapter's BenchmarkHeld10000: it reports the heap and
// goroutines per held lease with HeldLeases(10000) leases held through l.
// One measurement is one op: run it with -benchtime 1x.
func BenchHeld(b *testing.B, l *backend.Locker) {
	n, err := HeldLeases(10000)
	if err != nil {
		b.Fatal(err)
	}
	h, err := MeasureHeld(context.Background(), l, "held", n)
	if err != nil {
		b.Fatal(err)
	}
	h.Report(b)
}
