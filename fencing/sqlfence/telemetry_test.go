package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/pgtest"
)

// DoTx is observed like Do, and only once inside Do (the conformance
// suite's telemetry case covers Do itself).
func TestGuardTelemetryDoTx(t *testing.T) {
	t.Parallel()
	c := pgtest.Shared(t)
	rec := fencetest.NewRecorder(t)
	s := openGuard(t, c.NewDatabase(t), sqlfence.WithTelemetry(rec.Telemetry(false)))
	ctx := context.Background()
	require.NoError(t, s.CreateTable(ctx))
	for _, c := range []struct {
		tok  fencing.Token
		want fencing.Decision
	}{{5, fencing.DecisionAccepted}, {4, fencing.DecisionStale}, {0, fencing.DecisionError}} {
		tx, err := s.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		err = s.DoTx(ctx, tx, "doc", c.tok, nil)
		require.Equal(t, c.want, fencing.DecisionOf(err), "token %d: %v", c.tok, err)
		if err == nil {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
	}
	rec.Expect(t, "sql", fencetest.Observed{Decision: fencing.DecisionAccepted, Token: 5},
		fencetest.Observed{Decision: fencing.DecisionStale, Token: 4}, fencetest.Observed{Decision: fencing.DecisionError, Token: 0})
}

// A LeaseGuard counts a token overtaken by a newer grant and a token whose
// lease ended (ErrLeaseEnded) as stale, a failed write and an unreachable
// database as errors; Do and DoTx alike.
func TestLeaseGuardTelemetry(t *testing.T) {
	t.Parallel()
	l := openLeaseDB(t, sqlfence.DefaultLockPrefix)
	rec := fencetest.NewRecorder(t)
	g, err := sqlfence.NewLeaseGuard(l.db, sqlfence.WithLeaseTelemetry(rec.Telemetry(true)))
	require.NoError(t, err)
	ctx := context.Background()
	a, b := l.locker(t, l.dsn), l.locker(t, l.dsn)

	// 1s, not the minimum: the write must land while the lease lives (a
	// 100ms one had expired before it under scripts/test --under-load).
	old := acquire(t, a, "r", time.Second).Token()
	require.NoError(t, g.Do(ctx, "r", old, put("d", "by a")))
	l.waitExpired(t, "r")
	require.ErrorIs(t, g.Do(ctx, "r", old, put("d", "expired")), sqlfence.ErrLeaseEnded)
	newer := acquire(t, b, "r", time.Minute).Token()
	var st *fencing.StaleTokenError
	require.ErrorAs(t, g.Do(ctx, "r", old, put("d", "overtaken")), &st)
	boom := errors.New("boom")
	require.ErrorIs(t, g.Do(ctx, "r", newer, func(context.Context, *sql.Tx) error { return boom }), boom)

	tx, err := l.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, g.DoTx(ctx, tx, "r", newer, put("d", "by b")))
	require.NoError(t, tx.Commit())
	tx, err = l.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.ErrorIs(t, g.DoTx(ctx, tx, "r", old, nil), fencing.ErrStaleToken)
	require.NoError(t, tx.Rollback())

	port, err := freeport.Port()
	require.NoError(t, err)
	unreachable, err := sqlfence.NewLeaseGuard(pgtest.Open(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/nobody?sslmode=disable", port)),
		sqlfence.WithLeaseTelemetry(rec.Telemetry(true)))
	require.NoError(t, err)
	require.ErrorContains(t, unreachable.Do(ctx, "r", newer, nil), "connection refused")

	rec.Expect(t, "sql_lease",
		fencetest.Observed{Decision: fencing.DecisionAccepted, Token: old, Resource: "r"},
		fencetest.Observed{Decision: fencing.DecisionStale, Token: old, Resource: "r"},
		fencetest.Observed{Decision: fencing.DecisionStale, Token: old, Resource: "r"},
		fencetest.Observed{Decision: fencing.DecisionError, Token: newer, Resource: "r"},
		fencetest.Observed{Decision: fencing.DecisionAccepted, Token: newer, Resource: "r"},
		fencetest.Observed{Decision: fencing.DecisionStale, Token: old, Resource: "r"},
		fencetest.Observed{Decision: fencing.DecisionError, Token: newer, Resource: "r"})
}
