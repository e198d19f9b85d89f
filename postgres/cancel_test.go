package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// An acquire statement of a Locker opened from a URL that waits for the
// lock's row (held FOR SHARE by a long fenced write) and whose context ends
// is cancelled on the server too: no server backend is left waiting for
// the row, to take the lock later for nobody. pgx's default context
// handler closes the connection at once, and its close sends a
// CancelRequest first (pgconn's asyncClose), so nothing of the adapter's
// own is needed; this test keeps it so.
func TestCancelledAcquireEndsOnServer(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	ctx := tctx(t, time.Minute)
	holder := locker(t, dsn, Config{Prefix: prefix}, backend.WithTTL(10*time.Second))
	ls, err := holder.Acquire(ctx, "x")
	require.NoError(t, err)
	admin := newPool(t, dsn)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var one int
	require.NoError(t, tx.QueryRow(ctx, "SELECT 1 FROM "+prefix+"_locks WHERE name = 'x' FOR SHARE").Scan(&one))

	l, err := backend.Open(ctx, dsn+"&prefix="+prefix)
	require.NoError(t, err)
	defer l.Close()
	var worst time.Duration
	for range 5 {
		c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		start := time.Now()
		_, err := l.Acquire(c, "x") // a TryAcquire answers 'held' from the committed row
		cancel()
		worst = max(worst, time.Since(start))
		require.ErrorIs(t, err, backend.ErrUnavailable)
		require.NotErrorIs(t, err, backend.ErrNotAcquired, "a statement that got no answer is not 'held'")
	}
	require.Less(t, worst, time.Second)
	// No acquire statement waits on the server any more. (The
	// acquisitions' clean-ups, releases that wait for the row too, are
	// requests their Locker still waits for, within the lease's TTL.)
	require.Eventually(t, func() bool {
		var waiting int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%acquire_v1%'`).Scan(&waiting)
		return err == nil && waiting == 0
	}, 2*time.Second, 10*time.Millisecond, "cancelled acquire statements left server backends waiting for the lock's row")
	require.NoError(t, tx.Rollback(ctx))
	release(t, ls)
}
