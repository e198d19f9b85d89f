package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/pgtest"
)

// Tokens keep increasing across a server restart (a fast shutdown) and a
// crash (SIGKILL, then WAL recovery): the sequence is WAL-logged ahead of
// the values it hands out. A lease held across the restart survives it
// (its row does; the pool reconnects and renewals go on), and a waiter
// whose listener lost its connection is still granted at once by the
// release that follows.
func TestTokensAcrossRestart(t *testing.T) {
	c := pgtest.Start(t)
	dsn := c.NewDatabase(t)
	la := locker(t, dsn, Config{}, backend.WithTTL(10*time.Second))
	lb := locker(t, dsn, Config{}, backend.WithTTL(10*time.Second))
	ctx := tctx(t, 2*time.Minute)

	var last fencing.Token
	cycle := func(what string) {
		t.Helper()
		// The pool's connections died with the server: the first
		// requests may fail, as unavailable, never as held.
		var ls *backend.Lease
		require.Eventually(t, func() bool {
			var err error
			ls, err = la.TryAcquire(ctx, "n")
			if err != nil {
				require.ErrorIs(t, err, backend.ErrUnavailable, what)
			}
			return err == nil
		}, 30*time.Second, 50*time.Millisecond, what)
		require.Greater(t, ls.Token(), last, what)
		last = ls.Token()
		release(t, ls)
	}
	for range 3 {
		cycle("before the restart")
	}
	held, err := la.TryAcquire(ctx, "held")
	require.NoError(t, err)
	ch := goAcquire(ctx, lb, "held")
	requireBlocked(t, ch, 200*time.Millisecond)
	// Queued before the restart, not merely started: a busy machine may
	// not have sent its attempt in 200ms, and the restart would end it.
	require.Eventually(t, func() bool {
		st, err := la.Status(ctx, "held")
		return err == nil && len(st.Waiters) == 1
	}, 30*time.Second, 10*time.Millisecond, "the waiter did not queue")

	c.Restart(t)
	cycle("after the restart")
	require.Eventually(t, func() bool { return held.Refresh(ctx) == nil }, 10*time.Second, 50*time.Millisecond,
		"the held lease renews after the restart")
	require.NoError(t, held.Err())
	start := time.Now()
	release(t, held)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	require.Less(t, time.Since(start), 3*time.Second, "the waiter is granted by the release, not its fallback timer")
	require.Greater(t, r.Lease.Token(), held.Token())
	release(t, r.Lease)

	require.NoError(t, c.Kill())
	c.Restart(t)
	cycle("after a crash")
}

// A lease whose server went away is never reported as held by someone
// else: with the server stopped, TryAcquire fails as unavailable.
func TestServerDownIsUnavailable(t *testing.T) {
	c := pgtest.Start(t)
	l := locker(t, c.NewDatabase(t), Config{})
	ctx := tctx(t, 30*time.Second)
	ls, err := l.TryAcquire(ctx, "n")
	require.NoError(t, err)
	c.Stop()
	tctx2, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = l.TryAcquire(tctx2, "n")
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.False(t, errors.Is(err, backend.ErrNotAcquired))
	c.Restart(t)
	require.Eventually(t, func() bool { return ls.Refresh(ctx) == nil }, 10*time.Second, 50*time.Millisecond)
	release(t, ls)
}
