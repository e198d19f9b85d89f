package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/pgtest"
)

// standbyURL is a multi-host URL over a primary and its standby, as a
// user names such a pair: pgx connects to the first host that accepts
// writes, so after a promotion the Locker follows the new primary.
func standbyURL(t *testing.T, primary *pgtest.Cluster, standby *pgtest.Standby) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2&ttl=2s&prefix=%s",
		primary.Port(), standby.Port(), testPrefix(t))
}

// openUntil opens raw, trying again while the backend is unavailable (a
// server being promoted).
func openUntil(t *testing.T, ctx context.Context, raw string) *backend.Locker {
	t.Helper()
	var l *backend.Locker
	require.Eventually(t, func() bool {
		var err error
		l, err = backend.Open(ctx, raw)
		if err != nil {
			assert.ErrorIs(t, err, backend.ErrUnavailable)
		}
		return err == nil
	}, time.Minute, 100*time.Millisecond, "no Locker over the promoted standby")
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// An asynchronous standby promoted after it missed the primary's last
// grants does not hand their tokens out again: the clock floor makes the
// promoted server's next token larger than every token the old primary
// granted, so a guard that saw the stale holder's token admits the new
// holder and rejects the stale holder's write, and the stale holder's loss
// signal fires. With the tokens of schema version 1 (nextval of a
// sequence, WAL-logged 32 values ahead), the lost grants crossed a logging
// point, the promoted standby's sequence went back, and the new holder's
// token was below the stale one (the 70 -> 67).
func TestAsyncStandbyPromotedTokens(t *testing.T) {
	primary := pgtest.Start(t)
	standby := primary.StartStandby(t, false)
	raw := standbyURL(t, primary, standby)
	ctx := tctx(t, 3*time.Minute)
	la := openUntil(t, ctx, raw)

	var last fencing.Token
	cycle := func() {
		t.Helper()
		ls, err := la.TryAcquire(ctx, "n")
		require.NoError(t, err)
		require.Greater(t, ls.Token(), last)
		last = ls.Token()
		release(t, ls)
	}
	for range 5 {
		cycle()
	}
	standby.CaughtUp(t)
	standby.Link.Partition() // the standby receives nothing more
	for range 40 {
		cycle()
	}
	stale, err := la.TryAcquire(ctx, "n")
	require.NoError(t, err)
	require.Greater(t, stale.Token(), last)
	guard := fencing.NewMemory()
	require.NoError(t, guard.Do(ctx, "r", stale.Token(), func(context.Context) error { return nil }))

	require.NoError(t, primary.Kill())
	killed := time.Now()
	standby.Promote(t)
	promoted := time.Now()
	lb := openUntil(t, ctx, raw)
	var fresh *backend.Lease
	require.Eventually(t, func() bool {
		fresh, err = lb.TryAcquire(ctx, "n")
		if err != nil {
			assert.ErrorIs(t, err, backend.ErrUnavailable)
		}
		return err == nil
	}, time.Minute, 50*time.Millisecond)
	defer release(t, fresh)
	t.Logf("promoted %v after the kill; next grant %v after the kill; tokens %d (stale) -> %d",
		promoted.Sub(killed).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), stale.Token(), fresh.Token())
	require.Greater(t, fresh.Token(), stale.Token(), "the promoted standby handed out a token not above one the old primary granted")
	require.NoError(t, guard.Do(ctx, "r", fresh.Token(), func(context.Context) error { return nil }))
	err = guard.Do(ctx, "r", stale.Token(), func(context.Context) error {
		t.Error("the stale holder's write ran")
		return nil
	})
	require.ErrorIs(t, err, fencing.ErrStaleToken)
	select {
	case <-stale.Done():
		require.ErrorIs(t, stale.Err(), backend.ErrLeaseLost)
		t.Logf("the stale holder's loss signal fired %v after the kill: %v", time.Since(killed).Round(time.Millisecond), stale.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("the stale holder's loss signal did not fire")
	}
}

// With a synchronous standby that stops answering, every commit on the
// primary waits for it. A TryAcquire of a lock another holds answers
// ErrNotAcquired at once, although that holder's renewal keeps the lock's
// row locked while its commit waits; an Acquire of a free lock, whose
// grant's commit waits, fails with ErrUnavailable after one TTL, not when
// its (far later) context ends; the holder's loss signal fires at its
// deadline (locktest.SyncStandbyAway, which conformance/servers also runs
// on its synchronous topology). Once the standby is back, locks are
// granted again, and after the primary is killed and the standby
// promoted, tokens keep growing.
func TestSyncStandbyAway(t *testing.T) {
	primary := pgtest.Start(t)
	standby := primary.StartStandby(t, true)
	raw := standbyURL(t, primary, standby)
	ctx := tctx(t, 3*time.Minute)
	la := openUntil(t, ctx, raw)
	lb := openUntil(t, ctx, raw)
	last := locktest.SyncStandbyAway(t, la, lb, standby.Link.Partition, standby.Link.Heal,
		func() { pgtest.WaitSyncRep(t, primary.DSN()) })

	require.NoError(t, primary.Kill())
	killed := time.Now()
	standby.Promote(t)
	lc := openUntil(t, ctx, raw)
	require.Eventually(t, func() bool {
		ls, err := lc.TryAcquire(ctx, "free")
		if err != nil {
			assert.ErrorIs(t, err, backend.ErrUnavailable)
			return false
		}
		assert.Greater(t, ls.Token(), last)
		release(t, ls)
		return true
	}, time.Minute, 50*time.Millisecond, "no grant on the promoted standby")
	t.Logf("next grant %v after the kill", time.Since(killed).Round(time.Millisecond))
}
