package postgres

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/pgtest"
)

// srv is one PostgreSQL cluster shared by the package's tests that need
// nothing special of it (pgtest's shared cluster); each test works in a
// database or under a prefix of its own.
var srv *pgtest.Cluster

func TestMain(m *testing.M) {
	c, err := pgtest.SharedCluster()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv = c
	os.Setenv("FENCELOCK_POSTGRES_URL", srv.DSN()) // for Example
	os.Exit(pgtest.Main(m))
}

var prefixSeq atomic.Int64

// testPrefix returns a table prefix of its own for t.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("fl_t%d", prefixSeq.Add(1))
}

// newPool returns a pool of dsn, closed at cleanup.
func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// locker returns a Locker with its own pool of dsn, closed at cleanup (the
// Locker first, then the pool).
func locker(t testing.TB, dsn string, cfg Config, opts ...backend.Option) *backend.Locker {
	t.Helper()
	p := newPool(t, dsn)
	l, err := New(p, cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// The helpers the adapters' tests share, under this package's names.
type acquiredResult = locktest.Result

var (
	tctx           = locktest.Ctx
	goAcquire      = locktest.Go
	waitAcquired   = locktest.Wait
	requireBlocked = locktest.RequireBlocked
	release        = locktest.Release
)
