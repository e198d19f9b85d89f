package zookeeper

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// waiterLockers returns the Lockers the waiters of a drain share, under
// prefix pfx: a few sessions, as a handful of replicas would have.
func waiterLockers(tb testing.TB, pfx string) []*backend.Locker {
	ls := make([]*backend.Locker, 4)
	for i := range ls {
		ls[i] = dialLocker(tb, srv.Addr(), pfx, lockbench.HeldTTL)
	}
	return ls
}

// TestThousandWaitersFIFO queues 1,000 waiters on one lock and checks that
// they are granted in the order the server queued them (by sequence
// number).
func TestThousandWaitersFIFO(t *testing.T) {
	lockbench.RequireFIFO(t, waiterLockers(t, testPrefix(t)), "queue", 1000)
}

// BenchmarkDrain200 reports how 200 waiters on one lock drain: the total
// time and the handoff p50 and p99. One drain is one op: run it with
// -benchtime 1x.
func BenchmarkDrain200(b *testing.B) { benchDrain(b, 200) }

// BenchmarkDrain1000 is BenchmarkDrain200 with 1,000 waiters.
func BenchmarkDrain1000(b *testing.B) { benchDrain(b, 1000) }

func benchDrain(b *testing.B, n int) {
	times := measureServerTimes(b)
	d := lockbench.BenchDrain(b, waiterLockers(b, testPrefix(b)), n)
	times.Report(b, d.Handoffs)
}

// TestDrainWakeupsPerRelease queues waiters on one lock, lets the server
// settle, then releases the holder and lets the queue drain (each waiter
// releasing as soon as granted), and counts at the server (mntr) what each
// release cost: the requests it received and the watch events it sent. A
// release wakes two waiters, whatever the queue's length: its successor,
// which takes the lock without a request, and the waiter behind that, whose
// watch on the node two ahead tells it that it is next, and which reads the
// children (1 request) while the successor holds, off the handoff. With
// the release's delete, 2 requests per release. Events: those two, and the
// releaser's own watch on its node (nobody acts on it); a session gets one
// event per node however many of its leases watch it, so fewer when two of
// them share a session. A herd (every waiter woken, or a read per waiter)
// would grow with the queue: measured, 2.0 requests and 1.9 events per
// release with 200 waiters, 2.0 and 2.1 with 1,000.
func TestDrainWakeupsPerRelease(t *testing.T) {
	const waiters = 200
	pfx := testPrefix(t)
	lockers := waiterLockers(t, pfx)
	admin := srv.Connect(t, 10*time.Second)
	ctx := tctx(t, 2*time.Minute)
	holder, err := lockers[0].Acquire(ctx, "queue")
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls, err := lockers[i%len(lockers)].Acquire(ctx, "queue")
			if err == nil {
				err = ls.Release(ctx)
			}
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
			}
		}()
	}
	waitNodes(t, admin, pfx, "queue", waiters+1)
	requireQuiet(t)
	count := packetCounter(t)
	require.NoError(t, holder.Release(ctx))
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	requests, events := count(waiters + 1)
	t.Logf("%d waiters: %.2f requests and %.2f watch events per release", waiters, requests, events)
	assert.LessOrEqual(t, requests, 2.2, "requests per release")
	assert.LessOrEqual(t, events, 3.2, "watch events per release")
}

// requireQuiet waits until the server receives nothing but the mntr that
// asks for 300ms: the waiters have read the queue and set their watches.
func requireQuiet(t *testing.T) {
	t.Helper()
	last := int64(-1)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		m, err := srv.Monitor()
		require.NoError(t, err)
		if m["zk_packets_received"] <= last+1 { // the mntr itself counts one
			return
		}
		last = m["zk_packets_received"]
	}
	t.Fatal("the server did not quieten within a minute")
}
