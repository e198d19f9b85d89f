package mem_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// heldTTL is long enough that no renewal runs while the leases are counted.
const heldTTL = 30 * time.Second

func heldLocker(t testing.TB) *backend.Locker {
	l, err := mem.New(mem.NewServer().Connect(), backend.WithTTL(heldTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestHeldLeaseCost holds many leases at once and fails if one costs more
// than lockbench.MaxGoroutinesPerLease goroutines, or if releasing them
// leaves goroutines behind.
func TestHeldLeaseCost(t *testing.T) {
	n, err := lockbench.HeldLeases(2000)
	if err != nil {
		t.Fatal(err)
	}
	lockbench.RequireHeld(t, heldLocker(t), "held", n)
}

// BenchmarkHeld10000 reports the heap and goroutines per held lease with
// 10,000 leases held (FENCELOCK_HELD_LEASES overrides the count). One
// measurement is one op: run it with -benchtime 1x.
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
