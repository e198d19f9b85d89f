package etcd

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// waiterPool is the Lockers the waiters of a drain share: a few clients, as
// a handful of replicas would have, with their drivers for the wake-up
// count.
type waiterPool struct {
	lockers []*backend.Locker
	drivers []*etcdDriver
}

func newWaiterPool(t testing.TB, newClient func() *clientv3.Client, prefix string) *waiterPool {
	p := &waiterPool{}
	for range 4 {
		d := newDriver(newClient(), prefix, false)
		l, err := backend.New(d, backend.WithTTL(lockbench.HeldTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		p.lockers, p.drivers = append(p.lockers, l), append(p.drivers, d)
	}
	return p
}

// wakeups returns the predecessor deletions delivered to the waiters.
func (p *waiterPool) wakeups() int64 {
	var n int64
	for _, d := range p.drivers {
		n += d.wakeups.Load()
	}
	return n
}

// TestThousandWaitersFIFO queues 1,000 waiters on one lock and checks that
// they are granted in the order the server queued them, each woken once:
// by its predecessor's release alone. Under the race detector it queues
// 200, which take as long as 1,000 without it (1,000 took 45s).
func TestThousandWaitersFIFO(t *testing.T) {
	n := 1000
	if raceDetector {
		n = 200
	}
	p := newWaiterPool(t, func() *clientv3.Client { return client(t) }, testPrefix(t))
	lockbench.RequireFIFO(t, p.lockers, "queue", n)
	if w := p.wakeups(); w != int64(n) {
		t.Fatalf("%d wake-ups for %d releases, want one each", w, n)
	}
}

func benchDrain(b *testing.B, n int) {
	s := benchServer(b)
	p := newWaiterPool(b, func() *clientv3.Client { return benchClient(b, s) }, testPrefix(b))
	rt := measureRoundTrips(b, benchClient(b, s), testPrefix(b)+"/rtt")
	d := lockbench.BenchDrain(b, p.lockers, n)
	rt.Report(b, d.Handoffs)
	b.ReportMetric(float64(p.wakeups())/float64(n), "wakeups/release")
}

// BenchmarkDrain200 reports how 200 waiters on one lock drain: the total
// time, the handoff p50 and p99 (also in round trips), and the waiters
// woken per release. One drain is one op: run it with -benchtime 1x.
func BenchmarkDrain200(b *testing.B) { benchDrain(b, 200) }

// BenchmarkDrain1000 is BenchmarkDrain200 with 1,000 waiters.
func BenchmarkDrain1000(b *testing.B) { benchDrain(b, 1000) }
