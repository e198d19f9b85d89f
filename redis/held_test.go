package redis

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// heldLocker returns a Locker on the test server with a client as Open
// builds one (ContextTimeoutEnabled), under a prefix of its own.
func heldLocker(tb testing.TB) *backend.Locker {
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	l, err := New(c, Config{Prefix: testPrefix(tb)}, backend.WithTTL(lockbench.HeldTTL))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// TestHeldLeaseCost holds many leases at once and fails if one runs a
// goroutine or keeps more than lockbench.MaxHeapPerLease bytes of heap, or
// if releasing them leaves goroutines behind. A held lease runs no
// goroutine: its renewal is a timer, and Redis tells nothing that a
// goroutine would wait for.
func TestHeldLeaseCost(t *testing.T) { lockbench.CheckHeld(t, heldLocker(t), 0.01, true) }

// BenchmarkHeld10000 reports the heap and goroutines per held lease with
// 10,000 leases held (FENCELOCK_HELD_LEASES overrides the count); run it
// with -benchtime 1x.
func BenchmarkHeld10000(b *testing.B) { lockbench.BenchHeld(b, heldLocker(b)) }
