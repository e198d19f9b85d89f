package postgres

import (
	"testing"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// heldLocker returns a Locker with a pool of its own on a database of its
// own.
func heldLocker(tb testing.TB) *backend.Locker {
	return locker(tb, srv.NewDatabase(tb), Config{}, backend.WithTTL(lockbench.HeldTTL))
}

// TestHeldLeaseCost holds many leases at once and fails if one runs a
// goroutine or keeps more than lockbench.MaxHeapPerLease bytes of heap, or
// if releasing them leaves goroutines behind. A held lease runs no
// goroutine: its renewal is a timer, and the listener, one per Locker,
// runs only once an acquisition has waited.
func TestHeldLeaseCost(t *testing.T) { lockbench.CheckHeld(t, heldLocker(t), 0.01, true) }

// BenchmarkHeld10000 reports the heap and goroutines per held lease with
// 10,000 leases held (FENCELOCK_HELD_LEASES overrides the count); run it
// with -benchtime 1x.
func BenchmarkHeld10000(b *testing.B) { lockbench.BenchHeld(b, heldLocker(b)) }
