package mem_test

import (
	"testing"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// waiterLockers returns the Lockers the waiters of a drain share: a few
// connections, as a handful of replicas would have.
func waiterLockers(t testing.TB) []*backend.Locker {
	srv := mem.NewServer()
	ls := make([]*backend.Locker, 4)
	for i := range ls {
		l, err := mem.New(srv.Connect(), backend.WithTTL(lockbench.HeldTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ls[i] = l
	}
	return ls
}

// TestThousandWaitersFIFO queues 1,000 waiters on one lock and checks that
// they are granted in the order the server queued them.
func TestThousandWaitersFIFO(t *testing.T) {
	lockbench.RequireFIFO(t, waiterLockers(t), "queue", 1000)
}

// BenchmarkDrain200 and BenchmarkDrain1000 report how 200 and 1,000
// waiters on one lock drain: the total time and the handoff p50 and p99.
// One drain is one op: run them with -benchtime 1x.
func BenchmarkDrain200(b *testing.B) { benchDrain(b, 200) }

func BenchmarkDrain1000(b *testing.B) { benchDrain(b, 1000) }

func benchDrain(b *testing.B, n int) { lockbench.BenchDrain(b, waiterLockers(b), n) }
