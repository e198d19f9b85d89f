package zookeeper

import (
	"testing"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// heldLocker dials a Locker whose session timeout is lockbench.HeldTTL (the
// test server grants up to zktest.MaxSessionTimeout).
func heldLocker(tb testing.TB) *backend.Locker {
	return dialLocker(tb, srv.Addr(), testPrefix(tb), lockbench.HeldTTL)
}

// TestHeldLeaseCost holds many leases at once (one session) and fails if
// one runs a goroutine (the session dispatches the watches on the leases'
// own nodes) or keeps more than lockbench.MaxHeapPerLease bytes of heap
// (about 1.5-2.5 KB here), or if releasing them leaves goroutines behind.
func TestHeldLeaseCost(t *testing.T) { lockbench.CheckHeld(t, heldLocker(t), 0.01, true) }

// BenchmarkHeld10000 reports the heap and goroutines per held lease with
// 10,000 leases held in one session (FENCELOCK_HELD_LEASES overrides the
// count); run it with -benchtime 1x.
func BenchmarkHeld10000(b *testing.B) { lockbench.BenchHeld(b, heldLocker(b)) }
