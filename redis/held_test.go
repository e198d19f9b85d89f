package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// heldTTL is long enough that no renewal runs while the leases are counted.
const heldTTL = 30 * time.Second

// heldLocker returns a Locker on the test server with a client as Open
// builds one (ContextTimeoutEnabled), under a prefix of its own.
func heldLocker(tb testing.TB) *backend.Locker {
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	l, err := NewWithConfig(c, Config{Prefix: testPrefix(tb)}, backend.WithTTL(heldTTL))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// TestHeldLeaseCost holds many leases at once and fails if one runs a
// goroutine or keeps more than maxHeapPerLease bytes of heap, or if
// releasing them leaves goroutines behind. A held lease runs no goroutine:
// its renewal is a timer, and Redis tells nothing that a goroutine would
// wait for.
func TestHeldLeaseCost(t *testing.T) {
	n, err := lockbench.HeldLeases(2000)
	if err != nil {
		t.Fatal(err)
	}
	h := lockbench.RequireHeld(t, heldLocker(t), "held", n)
	// Below one goroutine per 100 leases: none of their own, only what a
	// busy client may start meanwhile (a pool's dial).
	if h.GoroutinesPerLease >= 0.01 {
		t.Errorf("%.3f goroutines per held lease, want none", h.GoroutinesPerLease)
	}
	if h.HeapPerLease > maxHeapPerLease {
		t.Errorf("%.0f B of heap per held lease, want at most %d", h.HeapPerLease, maxHeapPerLease)
	}
}

// maxHeapPerLease is issue 19's bound on the heap a held lease keeps.
const maxHeapPerLease = 4096

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
