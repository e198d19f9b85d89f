package pganchor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/lockbench"
	"github.com/fencelock/fencelock/internal/pganchor"
	"github.com/fencelock/fencelock/internal/pgtest"
)

const contenders = 8

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestAdvisory: eight sessions take one advisory lock in turn, never two
// at once; a session that does not hold it cannot release it.
func TestAdvisory(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.Start(t).NewDatabase(t)
	var cs []lockbench.Contender
	for range contenders {
		cs = append(cs, pganchor.Advisory(connect(t, dsn), 42))
	}
	_, err := lockbench.RunUncontended(ctx, cs[0], 5, 50, nil)
	require.NoError(t, err)
	r, err := lockbench.RunContendedHold(ctx, cs, 400, 100*time.Microsecond, nil)
	require.NoError(t, err, "mutual exclusion")
	require.GreaterOrEqual(t, r.Grants, 400)
	for i, n := range r.PerContender {
		require.Positive(t, n, "contender %d was never granted", i)
	}
	require.ErrorContains(t, cs[0].Unlock(ctx), "not held")
}

// TestLease: eight pollers take one lease in turn, never two at once, and
// the epoch counts every grant; a released lease cannot be released again.
func TestLease(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.Start(t).NewDatabase(t)
	admin := connect(t, dsn)
	require.NoError(t, pganchor.CreateLeaseTable(ctx, admin, "", "bench"))
	require.NoError(t, pganchor.CreateLeaseTable(ctx, admin, "", "bench"), "again: idempotent")
	var cs []lockbench.Contender
	for i := range contenders {
		c, err := pganchor.Lease(connect(t, dsn), fmt.Sprintf("owner-%d", i), pganchor.LeaseConfig{Name: "bench", TTL: 30 * time.Second})
		require.NoError(t, err)
		cs = append(cs, c)
	}
	u, err := lockbench.RunUncontended(ctx, cs[0], 5, 50, nil)
	require.NoError(t, err)
	r, err := lockbench.RunContendedHold(ctx, cs, 400, 100*time.Microsecond, nil)
	require.NoError(t, err, "mutual exclusion")
	var epoch int64
	var owner *string
	require.NoError(t, admin.QueryRow(ctx, `SELECT epoch, owner FROM leases WHERE name = 'bench'`).Scan(&epoch, &owner))
	require.Equal(t, int64(5+u.Ops+r.Grants), epoch, "one epoch per grant")
	require.Nil(t, owner, "free after the run")
	require.ErrorIs(t, cs[0].Unlock(ctx), pganchor.ErrLeaseLost)
}

// TestLeaseExpiresWhileHeld: a lease that ends while its holder still
// works goes to a poller, and RunContended sees the two holders: the
// check the tests above rely on works on this lock.
func TestLeaseExpiresWhileHeld(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.Start(t).NewDatabase(t)
	require.NoError(t, pganchor.CreateLeaseTable(ctx, connect(t, dsn), "short", "x"))
	var cs []lockbench.Contender
	for i := range 2 {
		c, err := pganchor.Lease(connect(t, dsn), fmt.Sprintf("o%d", i), pganchor.LeaseConfig{Table: "short", Name: "x", TTL: time.Millisecond})
		require.NoError(t, err)
		cs = append(cs, c)
	}
	_, err := lockbench.RunContendedHold(ctx, cs, 10, 50*time.Millisecond, nil)
	require.ErrorIs(t, err, lockbench.ErrOverlap)
}

func TestLeaseConfig(t *testing.T) {
	for _, tc := range []struct {
		owner string
		cfg   pganchor.LeaseConfig
		want  string
	}{
		{"", pganchor.LeaseConfig{Name: "a", TTL: time.Second}, "empty owner"},
		{"o", pganchor.LeaseConfig{TTL: time.Second}, "empty lease name"},
		{"o", pganchor.LeaseConfig{Name: "a", TTL: time.Microsecond}, "under 1ms"},
		{"o", pganchor.LeaseConfig{Name: "a", TTL: time.Second, Poll: -1}, "negative poll"},
	} {
		_, err := pganchor.Lease(nil, tc.owner, tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
}
