package etcd

import (
	"testing"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

func heldLocker(tb testing.TB) *backend.Locker {
	return locker(tb, testPrefix(tb), backend.WithTTL(lockbench.HeldTTL))
}

// TestHeldLeaseCost holds many leases at once and fails if one runs a
// goroutine (the watches of held keys share one stream and its two
// goroutines per Locker), or if releasing them leaves goroutines behind.
// The heap is logged, not checked: it includes the embedded server's share
// (its leases, keys and watchers).
func TestHeldLeaseCost(t *testing.T) { lockbench.CheckHeld(t, heldLocker(t), 0.05, false) }

// BenchmarkHeld10000 reports the heap and goroutines per held lease with
// 10,000 leases held (FENCELOCK_HELD_LEASES overrides the count), the
// embedded server's share of the heap included; run it with -benchtime 1x.
func BenchmarkHeld10000(b *testing.B) { lockbench.BenchHeld(b, heldLocker(b)) }
