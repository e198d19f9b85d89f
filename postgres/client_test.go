package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// New refuses a client that is one session, which a Locker's concurrent
// renewals and acquisitions cannot share: a *pgx.Conn, a connection taken
// from a pool (*pgxpool.Conn), a transaction (pgx.Tx); it takes the pool.
func TestNewRefusesSessions(t *testing.T) {
	dsn := srv.NewDatabase(t)
	ctx := tctx(t, 30*time.Second)
	pool := newPool(t, dsn)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	pc, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer pc.Release()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, c := range []Client{conn, pc, tx} {
		_, err := New(c, Config{})
		require.ErrorIs(t, err, backend.ErrInvalidOption, "%T", c)
	}
	l, err := New(pool, Config{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
}
