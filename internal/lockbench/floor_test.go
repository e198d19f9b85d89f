package lockbench_test

import (
	"context"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/internal/lockbench"
)

// The floor: the adapters' benchmarks (same names, same metrics, same
// rounds) on an in-process sync.Mutex, which scripts/bench reports beside
// every backend. It is what the measurement itself costs plus the least
// any lock can take, with no server and no network:
//
//	FENCELOCK_BENCH_ROUNDS=6 go test -run '^$' -bench . -benchtime 200000x ./internal/lockbench/
//
// Use a fixed -benchtime: a timed run makes b.N tens of millions here, and
// lockbench keeps every op's duration.

// floorImpl names the only implementation, as the sub-benchmarks' impl.
const floorImpl = "sync.Mutex"

func mutexContender(mu *sync.Mutex) lockbench.Contender {
	return lockbench.Contender{
		Lock:   func(context.Context) error { mu.Lock(); return nil },
		Unlock: func(context.Context) error { mu.Unlock(); return nil },
	}
}

// floorRounds runs run in the rounds of lockbench.Interleave, as the
// sub-benchmark round=R/impl=sync.Mutex.
func floorRounds(b *testing.B, run func(b *testing.B)) {
	lockbench.Interleave(b, []string{floorImpl}, func(name string) string { return name }, func(b *testing.B, _ string) { run(b) })
}

// BenchmarkUncontended: one Lock+Unlock of a free sync.Mutex.
func BenchmarkUncontended(b *testing.B) {
	floorRounds(b, func(b *testing.B) {
		var mu sync.Mutex
		lockbench.BenchUncontended(b, mutexContender(&mu), 10)
	})
}

// BenchmarkContended8: 8 goroutines lock and unlock one sync.Mutex in a
// loop; one op is one grant.
func BenchmarkContended8(b *testing.B) {
	floorRounds(b, func(b *testing.B) {
		var mu sync.Mutex
		cs := make([]lockbench.Contender, 8)
		for i := range cs {
			cs[i] = mutexContender(&mu)
		}
		lockbench.BenchContended(b, cs, 0)
	})
}
