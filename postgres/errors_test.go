package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// A statement that a user's lock_timeout ends while it waits for the
// lock's row (held FOR SHARE by a fenced write, a long transaction) fails
// with SQLSTATE 55P03 lock_not_available: the server did not say whether
// the lock is held, so Acquire's error is ErrUnavailable, never
// ErrNotAcquired. (A TryAcquire of a lock another holds answers from the
// committed row without waiting for the row lock.)
func TestLockTimeoutIsUnavailable(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	ctx := tctx(t, time.Minute)
	holder := locker(t, dsn, Config{Prefix: prefix})
	ls, err := holder.Acquire(ctx, "x")
	require.NoError(t, err)
	defer release(t, ls)

	admin := newPool(t, dsn)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var one int
	require.NoError(t, tx.QueryRow(ctx, "SELECT 1 FROM "+prefix+"_locks WHERE name = 'x' FOR SHARE").Scan(&one))

	short := locker(t, dsn+"&options=-c%20lock_timeout%3D50ms", Config{Prefix: prefix})
	_, err = short.Acquire(ctx, "x")
	require.Error(t, err)
	require.ErrorContains(t, err, "55P03")
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.NotErrorIs(t, err, backend.ErrNotAcquired)
}
