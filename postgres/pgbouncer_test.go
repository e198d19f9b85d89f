package postgres

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/pgtest"
)

// Through PgBouncer in transaction mode: the migration, grants, renewals,
// releases and the queue work with the statements of many Lockers
// interleaved on shared server connections (no prepared statement or
// session state survives a transaction there), tokens grow, and a waiter is
// woken by its listener, pointed past the pooler with listen_host. A
// Locker without a listener (listen=false) gets its grant from its
// renewals.
func TestThroughPgBouncer(t *testing.T) {
	b := pgtest.StartPgBouncer(t, srv)
	via := b.Via(t, srv.NewDatabase(t)) + "&prefix=fl_pgb"
	listen := via + "&listen_host=127.0.0.1:" + strconv.Itoa(srv.Port())
	ctx := tctx(t, 2*time.Minute)
	open := func(raw string) *backend.Locker {
		l, err := backend.Open(ctx, raw)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	lockers := []*backend.Locker{open(listen + "&ttl=2s"), open(listen + "&ttl=2s"), open(listen + "&ttl=2s")}

	// Contenders on one lock over three Lockers: exclusive, tokens grow.
	var (
		mu      sync.Mutex
		holding bool
		last    uint64
		wg      sync.WaitGroup
	)
	for i := range 6 {
		wg.Go(func() {
			for range 15 {
				ls, err := lockers[i%3].Acquire(ctx, "shared")
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				assert.False(t, holding, "two holders at once")
				assert.Greater(t, uint64(ls.Token()), last)
				holding, last = true, uint64(ls.Token())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holding = false
				mu.Unlock()
				assertNoError(t, ls.Release(ctx))
			}
		})
	}
	wg.Wait()

	ls, err := lockers[0].TryAcquire(ctx, "n")
	require.NoError(t, err)
	ch := goAcquire(ctx, lockers[1], "n")
	requireBlocked(t, ch, 200*time.Millisecond)
	time.Sleep(2 * time.Second) // renewals of both, through the pooler
	require.NoError(t, ls.Err())
	start := time.Now()
	release(t, ls)
	r := waitAcquired(t, ch, 5*time.Second)
	require.NoError(t, r.Err)
	require.Less(t, time.Since(start), time.Second, "woken by the notification, not a timer")
	release(t, r.Lease)

	lv, err := lockers[0].TryAcquire(ctx, "e", backend.WithValue("a1"))
	require.NoError(t, err)
	require.NoError(t, lv.Proclaim(ctx, "a2"))
	st, err := lockers[1].Status(ctx, "e")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	require.Equal(t, "a2", st.Holder.Value)
	require.Equal(t, lv.Token(), st.Holder.Token)
	release(t, lv)

	quiet := open(via + "&listen=false&ttl=600ms")
	ls, err = lockers[0].TryAcquire(ctx, "q")
	require.NoError(t, err)
	ch = goAcquire(ctx, quiet, "q")
	requireBlocked(t, ch, 200*time.Millisecond)
	release(t, ls)
	r = waitAcquired(t, ch, 5*time.Second)
	require.NoError(t, r.Err)
	release(t, r.Lease)
}

// assertNoError is require.NoError for a goroutine other than the test's.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
