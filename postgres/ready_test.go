package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// While one call of a Locker migrates the schema and waits for another
// process's migration (its advisory lock), the Locker's other calls wait
// for it only as long as their contexts let them: a TryAcquire with a
// 200ms context returns soon after, with ErrUnavailable, not when the
// other migration ends.
func TestMigrationWaitHeedsContext(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	ctx := tctx(t, time.Minute)
	admin := newPool(t, dsn)
	// Another process is migrating: it holds the migration's lock.
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d, hashtext('%s'))", migrateLockKey, prefix))
	require.NoError(t, err)

	l := locker(t, dsn, Config{Prefix: prefix})
	first := goAcquire(ctx, l, "first") // migrates: waits for the advisory lock
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'advisory'`).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 5*time.Millisecond)

	c2, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = l.TryAcquire(c2, "second")
	took := time.Since(start)
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, backend.ErrNotAcquired)
	require.Less(t, took, time.Second, "returned %v after a 200ms context", took)

	require.NoError(t, tx.Rollback(ctx))
	r := waitAcquired(t, first, 10*time.Second)
	require.NoError(t, r.Err)
	release(t, r.Lease)
}
