package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// heldTTL is the session timeout of the held-lease tests: long enough that
// no renewal runs while the leases are counted (the test server grants up
// to zktest.MaxSessionTimeout).
const heldTTL = 30 * time.Second

func heldLocker(tb testing.TB) *backend.Locker {
	return dialLocker(tb, srv.Addr(), testPrefix(tb), heldTTL)
}

// TestHeldLeaseCost holds many leases at once (one session) and fails if
// one costs more than lockbench.MaxGoroutinesPerLease goroutines, or if
// releasing them leaves goroutines behind. A held lease here runs no
// goroutine at all (the session dispatches the watches on the leases' own
// nodes) and keeps about 1.5–2.5 KB of heap: the test also fails above
// 0.01 goroutines or 4 KB per lease.
func TestHeldLeaseCost(t *testing.T) {
	n, err := lockbench.HeldLeases(2000)
	if err != nil {
		t.Fatal(err)
	}
	h := lockbench.RequireHeld(t, heldLocker(t), "held", n)
	if h.GoroutinesPerLease > 0.01 {
		t.Errorf("%.3f goroutines per held lease, want none", h.GoroutinesPerLease)
	}
	if h.HeapPerLease > 4096 {
		t.Errorf("%.0f B of heap per held lease, want at most 4 KB", h.HeapPerLease)
	}
}

// BenchmarkHeld10000 reports the heap and goroutines per held lease with
// 10,000 leases held in one session (FENCELOCK_HELD_LEASES overrides the
// count). One measurement is one op: run it with -benchtime 1x.
func BenchmarkHeld10000(b *testing.B) {
	n, err := lockbench.HeldLeases(10000)
	if err != nil {
		b.Fatal(err)
	}
	h, err := lockbench.MeasureHeld(context.Background(), heldLocker(b), "held", n)
	if err != nil {
		b.Fatal(err)
	}
	h.Report(b)
}
