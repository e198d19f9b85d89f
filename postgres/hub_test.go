package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// listening reports whether h's LISTEN is in effect, so that a
// notification sent from now on reaches the hub.
func (h *hub) listening() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up
}

// A listener whose connection the server ends (pg_terminate_backend)
// connects again, and its waiters try again then, since a notification may
// have been lost meanwhile: a release made while the listener was down
// still grants the waiter within the listener's backoff, not at the
// holder's remaining TTL (backend.DefaultTTL), nor at the waiter's next
// renewal (10s: lockbench.HeldTTL/3).
func TestListenerReconnects(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	admin := newPool(t, dsn)
	holder := locker(t, dsn, Config{Prefix: prefix})
	p := newWaiterPool(t, dsn, prefix, 1)
	ctx := tctx(t, 60*time.Second)
	ls, err := holder.TryAcquire(ctx, "n")
	require.NoError(t, err)
	ch := goAcquire(ctx, p.lockers[0], "n")
	require.Eventually(t, p.drivers[0].hub.listening, 10*time.Second, 5*time.Millisecond)

	// End the listener's session and release while it is down, before it
	// reconnects (its first retry waits 50ms).
	terminateListeners := `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`
	var n int
	require.NoError(t, admin.QueryRow(ctx, terminateListeners).Scan(&n))
	require.Equal(t, 1, n)
	require.Eventually(t, func() bool { return !p.drivers[0].hub.listening() }, 5*time.Second, time.Millisecond)
	start := time.Now()
	release(t, ls)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	require.Less(t, time.Since(start), 5*time.Second, "granted when the listener came back, not at the holder's TTL")
	require.Eventually(t, p.drivers[0].hub.listening, 10*time.Second, 5*time.Millisecond)
	release(t, r.Lease)
}
