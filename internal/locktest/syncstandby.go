package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

// SyncStandbyAway checks what Lockers do while their server's synchronous
// standby is away, so that every commit waits for it (the postgres adapter
// on a primary with synchronous_standby_names: its documentation's
// "Synchronous standby"). holder takes the lock "held"; cut cuts the
// standby off, and waiting returns once a commit waits for it (the
// holder's renewal, which keeps the lock's row locked). Then, through
// other: a TryAcquire of "held" answers backend.ErrNotAcquired at once,
// without waiting for that renewal; an Acquire of the free lock "free"
// fails with backend.ErrUnavailable within about one TTL, not when its
// context (2 minutes) ends; and the holder's loss signal fires. Once heal
// has brought the standby back, "free" is granted again (after the grant
// that was given up, committed on the primary alone, has lapsed): it
// returns that grant's token. The Lockers' TTL must be a few seconds.
func SyncStandbyAway(t testing.TB, holder, other *backend.Locker, cut, heal, waiting func()) fencing.Token {
	t.Helper()
	ctx := Ctx(t, 3*time.Minute)
	held, err := holder.TryAcquire(ctx, "held")
	require.NoError(t, err)
	cut()
	waiting()

	start := time.Now()
	_, err = other.TryAcquire(Ctx(t, 20*time.Second), "held")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.Less(t, time.Since(start), 10*time.Second, "TryAcquire waited for the holder's renewal")
	t.Logf("standby away: TryAcquire of the held lock answered in %v", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	_, err = other.Acquire(Ctx(t, 2*time.Minute), "free")
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), time.Minute, "Acquire blocked for as long as its context let it")
	t.Logf("standby away: Acquire of a free lock failed in %v: %v", time.Since(start).Round(time.Millisecond), err)

	select {
	case <-held.Done():
		require.ErrorIs(t, held.Err(), backend.ErrLeaseLost)
		t.Logf("standby away: the holder's loss signal: %v", held.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("the holder's loss signal did not fire while its renewals waited")
	}

	heal()
	var last fencing.Token
	require.Eventually(t, func() bool {
		ls, err := other.TryAcquire(ctx, "free")
		if err != nil {
			// The grant that timed out committed on the primary and
			// holds the lock until its TTL ends.
			if !errors.Is(err, backend.ErrNotAcquired) {
				assert.ErrorIs(t, err, backend.ErrUnavailable)
			}
			return false
		}
		last = ls.Token()
		Release(t, ls)
		return true
	}, time.Minute, 50*time.Millisecond, "no grant once the standby was back")
	return last
}
