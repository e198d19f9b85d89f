package servers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance/servers"
	"github.com/fencelock/fencelock/fencing"
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
			partitionWorks(t, s)
		})
	}
}

// TestLocalPostgresHooks runs every hook of a local PostgreSQL.
func TestLocalPostgresHooks(t *testing.T) {
	t.Parallel()
	s := servers.StartWith(t, servers.Local, servers.Postgres, servers.Single)
	require.Equal(t, servers.Local, s.Provider)
	require.Len(t, s.Members, 1)
	require.True(t, strings.HasPrefix(s.URL, "postgres://"), s.URL)
	pgHooksWork(t, s)
}

// partitionProbe is how long an operation through a disconnected member
// is given: it must time out, not fail sooner.
const partitionProbe = time.Second

// partitionWorks disconnects the server's only member and reconnects it: a
// Locker opened before can neither acquire nor fail fast meanwhile (its
// request times out: the connection hangs, as in a network partition,
// rather than closing), and afterwards it, and a new Locker, acquire and
// release again.
func partitionWorks(t *testing.T, s *servers.Server) {
	t.Helper()
	ctx := hookCtx(t)
	m := s.Members[0]
	l, err := backend.Open(ctx, s.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	require.NoError(t, cycle(ctx, l, 10*time.Second, 5*time.Second), "before the partition")

	// The lease's TTL bounds the clean-up after a failed Acquire, which
	// waits out the partition too, so take etcd's least. A ZooKeeper
	// lease's TTL is its session's timeout: keep the session opened
	// above, so the request goes where one is already established.
	ttl := 2 * time.Second
	if s.Kind == servers.ZooKeeper {
		ttl = 5 * time.Second
	}
	require.NoError(t, m.Disconnect(ctx))
	start := time.Now()
	err = cycle(ctx, l, partitionProbe, ttl)
	took := time.Since(start)
	require.Error(t, err, "a lock cycle got through a partition")
	require.GreaterOrEqual(t, took, partitionProbe*9/10, "failed fast (%v), as on a closed connection, not by timing out", err)
	t.Logf("during the partition: %v after %v", err, took.Round(time.Millisecond))

	start = time.Now()
	require.NoError(t, m.Reconnect(ctx))
	t.Logf("reconnected in %v", time.Since(start).Round(time.Millisecond))
	require.NoError(t, cycle(ctx, l, 10*time.Second, 5*time.Second), "the Locker opened before the partition, after it")
	lockWorks(t, s.URL, 1)
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

// TestLocalEtcdHooks stops, restarts and kills a local (embedded) etcd:
// it comes back with its data on the same address, tokens still grow, and
// Pause is unsupported.
func TestLocalEtcdHooks(t *testing.T) {
	t.Parallel()
	s := servers.StartWith(t, servers.Local, servers.Etcd, servers.Single)
	ctx := hookCtx(t)
	m := s.Members[0]
	before := lockToken(t, s.URL)
	require.NoError(t, m.Stop(ctx))
	require.Error(t, lockOnce(s.URL), "a stopped server does not grant")
	require.NoError(t, m.Restart(ctx))
	after := lockToken(t, s.URL)
	require.Greater(t, after, before, "the revision survived the restart")
	require.NoError(t, m.Kill(ctx))
	require.NoError(t, m.Restart(ctx))
	lockWorks(t, s.URL, 1)
	require.ErrorIs(t, m.Pause(ctx), errors.ErrUnsupported)
}

// lockToken acquires and releases a lock at u and returns its token.
func lockToken(t *testing.T, u string) fencing.Token {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := backend.Open(ctx, u)
	require.NoError(t, err)
	defer l.Close()
	ls, err := l.Acquire(ctx, "hooks")
	require.NoError(t, err)
	require.NoError(t, ls.Release(ctx))
	return ls.Token()
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
