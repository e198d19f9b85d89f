package postgres

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// Migrate is idempotent and safe to run from several processes at once
// (the advisory lock): four at once on an empty database all succeed, and
// the schema is then current (no DDL at the next run).
func TestMigrateConcurrent(t *testing.T) {
	p := newPool(t, srv.NewDatabase(t))
	prefix := testPrefix(t)
	ctx := tctx(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = Migrate(ctx, p, prefix) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	current, err := schemaCurrent(ctx, p, prefix)
	require.NoError(t, err)
	require.True(t, current)
	require.NoError(t, Migrate(ctx, p, prefix))
	var n int
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM "+prefix+"_locks").Scan(&n))
}

// Schema is the SQL Migrate runs, one transaction, for a valid prefix only.
func TestSchema(t *testing.T) {
	s, err := Schema("")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(s, "BEGIN;"))
	require.True(t, strings.HasSuffix(s, "COMMIT;\n"))
	for _, name := range []string{"fencelock_locks", "fencelock_waiters", "fencelock_queue", "fencelock_acquire_v1"} {
		require.Contains(t, s, name)
	}
	require.NotContains(t, s, "{p}")
	for _, bad := range []string{"Locks", "a-b", "1a", "a b", "a;drop", strings.Repeat("a", 41), "a.b"} {
		_, err := Schema(bad)
		require.ErrorIs(t, err, backend.ErrInvalidOption, bad)
		require.ErrorIs(t, Migrate(context.Background(), newPool(t, srv.DSN()), bad), backend.ErrInvalidOption, bad)
	}
}

// With NoMigrate and no schema, an acquisition fails with an error that
// names Migrate, never ErrNotAcquired.
func TestNoMigrate(t *testing.T) {
	l := locker(t, srv.NewDatabase(t), Config{NoMigrate: true})
	_, err := l.TryAcquire(tctx(t, 10*time.Second), "n")
	require.ErrorContains(t, err, "postgres.Migrate")
	require.NotErrorIs(t, err, backend.ErrNotAcquired)
}
