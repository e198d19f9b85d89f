package mem_test

import (
	"testing"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/internal/lockbench"
)

func heldLocker(t testing.TB) *backend.Locker {
	l, err := mem.New(mem.NewServer().Connect(), backend.WithTTL(lockbench.HeldTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestHeldLeaseCost holds many leases at once and fails if one runs a
// goroutine (the server's end of a lease is reported by context.AfterFunc)
// or keeps more than lockbench.MaxHeapPerLease bytes, or if releasing them
// leaves goroutines behind.
func TestHeldLeaseCost(t *testing.T) { lockbench.CheckHeld(t, heldLocker(t), 0.01, true) }

// BenchmarkHeld10000 reports the heap and goroutines per held lease with
// 10,000 leases held (FENCELOCK_HELD_LEASES overrides the count); run it
// with -benchtime 1x.
func BenchmarkHeld10000(b *testing.B) { lockbench.BenchHeld(b, heldLocker(b)) }
