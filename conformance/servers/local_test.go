package servers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/conformance/servers"
)

// The TestLocal* tests need Debian's zookeeper, redis-server and
// postgresql (scripts/test installs them): they fail without them.

func TestLocal(t *testing.T) {
	t.Parallel()
	for _, k := range servers.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			s := servers.StartWith(t, servers.Local, k, servers.Single)
			require.Equal(t, servers.Local, s.Provider)
			require.Len(t, s.Members, 1)
			lockWorks(t, s.URL, 1)
			err := s.Members[0].Disconnect(context.Background())
			require.ErrorIs(t, err, errors.ErrUnsupported)
		})
	}
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		s := servers.StartWith(t, servers.Local, servers.Postgres, servers.Single)
		ctx := hookCtx(t)
		pgSelect(t, ctx, s.URL)
		require.NoError(t, s.Members[0].Restart(ctx))
		pgSelect(t, ctx, s.URL)
	})
}

// TestLocalRedisHooks kills, restarts, pauses and unpauses a local
// redis-server.
func TestLocalRedisHooks(t *testing.T) {
	t.Parallel()
	s := servers.StartWith(t, servers.Local, servers.Redis, servers.Single)
	ctx := hookCtx(t)
	m := s.Members[0]
	require.NoError(t, m.Kill(ctx))
	require.Error(t, lockOnce(s.URL), "a killed server does not grant")
	require.NoError(t, m.Restart(ctx))
	lockWorks(t, s.URL, 1)
	require.NoError(t, m.Pause(ctx))
	require.NoError(t, m.Unpause(ctx))
	lockWorks(t, s.URL, 1)
}

func pgSelect(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer c.Close(context.Background())
	var n int
	require.NoError(t, c.QueryRow(ctx, "SELECT 1").Scan(&n))
	require.Equal(t, 1, n)
}

// TestLocalMissingBinaryFails: a missing binary fails the test, with the
// reason; nothing skips.
func TestLocalMissingBinaryFails(t *testing.T) {
	t.Setenv("REDIS_SERVER", "/nonexistent/redis-server")
	failed, msgs := runInner(t, func(tb testing.TB) { servers.StartWith(tb, servers.Local, servers.Redis, servers.Single) })
	require.True(t, failed)
	require.Len(t, msgs, 1)
	require.Contains(t, msgs[0], "/nonexistent/redis-server")
}
