package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
)

// TestClientClosed: a pool closed by its owner under the Locker (puddle's
// ErrClosedPool) is backend.ErrClientClosed on every call, and the lease
// held then is lost at its next renewal.
func TestClientClosed(t *testing.T) {
	dsn := srv.NewDatabase(t)
	prefix := testPrefix(t)
	other := locker(t, dsn, Config{Prefix: prefix})
	locktest.ClientClosed(t, other, 6*time.Second, func(t *testing.T) (*backend.Locker, func()) {
		p, err := pgxpool.New(context.Background(), dsn)
		require.NoError(t, err)
		l, err := New(p, Config{Prefix: prefix})
		require.NoError(t, err)
		return l, p.Close
	})
}
