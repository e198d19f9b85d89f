package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFastPathKeepsFIFO: the one-UPDATE acquire of a free lock applies
// only while its row says that nobody waits (queued false). A waiter
// queued behind a holder whose lease then lapses (no release, so no
// promotion) is granted before a newcomer, and the flag is cleared only
// once a grant or release finds the queue empty.
func TestFastPathKeepsFIFO(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, srv.DSN())
	p := testPrefix(t)
	require.NoError(t, Migrate(ctx, pool, p))
	s := statementsFor(p)
	acquire := func(owner string, ttlMs int64, m mode) (status string) {
		t.Helper()
		var tok, wait int64
		require.NoError(t, pool.QueryRow(ctx, s.acquire, "n", owner, ttlMs, int(m), nil, nil).Scan(&status, &tok, &wait))
		return status
	}
	row := func() (owner *string, queued bool) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, "SELECT owner, queued FROM "+p+"_locks WHERE name = 'n'").Scan(&owner, &queued))
		return owner, queued
	}
	require.Equal(t, "granted", acquire("a.1", 150, modeTry))
	_, queued := row()
	require.False(t, queued, "a grant that found the queue empty clears the flag")
	require.Equal(t, "queued", acquire("b.1", 60_000, modeJoin))
	_, queued = row()
	require.True(t, queued)

	time.Sleep(250 * time.Millisecond) // a's lease lapses, unreleased
	require.Equal(t, "held", acquire("c.1", 60_000, modeTry), "a newcomer must not overtake the waiter")
	owner, queued := row()
	require.Equal(t, "b.1", *owner, "the waiter was granted the lapsed lock")
	require.True(t, queued, "only a grant or release that finds the queue empty clears the flag")

	var status string
	require.NoError(t, pool.QueryRow(ctx, s.release, "n", "b.1").Scan(&status))
	require.Equal(t, "released", status)
	owner, queued = row()
	require.Nil(t, owner)
	require.False(t, queued)
	require.Equal(t, "granted", acquire("c.1", 60_000, modeTry))
	require.NoError(t, pool.QueryRow(ctx, s.release, "n", "c.1").Scan(&status))
	require.Equal(t, "released", status)
}
