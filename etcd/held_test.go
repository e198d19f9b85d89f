package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// heldTTL is long enough that no renewal runs while the leases are counted.
const heldTTL = 30 * time.Second

// TestHeldLeaseCost holds many leases at once and fails if one costs more
// than lockbench.MaxGoroutinesPerLease goroutines, or if releasing them
// leaves goroutines behind. The heap it logs includes the embedded
// server's share (its leases, keys and watchers).
func TestHeldLeaseCost(t *testing.T) {
	n, err := lockbench.HeldLeases(2000)
	if err != nil {
		t.Fatal(err)
	}
	lockbench.RequireHeld(t, locker(t, testPrefix(t), backend.WithTTL(heldTTL)), "held", n)
}

// BenchmarkHeld10000 reports the heap and goroutines per held lease with
// 10,000 leases held (FENCELOCK_HELD_LEASES overrides the count), the
// embedded server's share of the heap included. One measurement is one
// op: run it with -benchtime 1x.
func BenchmarkHeld10000(b *testing.B) {
	n, err := lockbench.HeldLeases(10000)
	if err != nil {
		b.Fatal(err)
	}
	h, err := lockbench.MeasureHeld(context.Background(), locker(b, testPrefix(b), backend.WithTTL(heldTTL)), "held", n)
	if err != nil {
		b.Fatal(err)
	}
	h.Report(b)
}
