package servers

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/redis"
)

// The local Redis Sentinel and Sharded topologies: see redisTopologyWorks.
func TestLocalRedisTopologies(t *testing.T) {
	for _, topo := range []Topology{Sentinel, Sharded} {
		t.Run(string(topo), func(t *testing.T) {
			t.Parallel()
			redisTopologyWorks(t, StartWith(t, Local, Redis, topo))
		})
	}
	_, err := Resolve(Local, Etcd, Sentinel)
	require.ErrorContains(t, err, "is a Redis topology")
}

// The Docker Redis Sentinel and Sharded topologies, on the host's network:
// see redisTopologyWorks.
func TestDockerRedisTopologies(t *testing.T) {
	skipDockerInShort(t)
	t.Parallel()
	for _, topo := range []Topology{Sentinel, Sharded} {
		t.Run(string(topo), func(t *testing.T) {
			t.Parallel()
			s := StartWith(t, Docker, Redis, topo)
			require.Equal(t, Docker, s.Provider)
			redisTopologyWorks(t, s)
		})
	}
}

// redisTopologyWorks checks a Redis Sentinel or Sharded Server: its
// members and roles, that Primary names the primary as started (Sharded:
// the first master, which serves slot 0), that its URL opens and grants,
// that Failover promotes another member, which Primary then names, and
// that the URL then grants the same lock again with a larger token, that
// the former primary of a Sentinel deployment comes back from a kill as
// the new primary's replica, and that the last member can be paused,
// killed and restarted.
func redisTopologyWorks(t *testing.T, s *Server) {
	want := []string{"primary", "replica", "sentinel", "sentinel", "sentinel"}
	if s.Topology == Sharded {
		want = []string{"primary", "primary", "primary", "replica", "replica", "replica"}
	}
	var roles []string
	for _, m := range s.Members {
		roles = append(roles, m.Role)
	}
	require.Equal(t, want, roles)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := backend.Open(ctx, s.URL+"&ttl=3s")
	require.NoError(t, err)
	defer l.Close()
	before, err := s.Primary(ctx)
	require.NoError(t, err)
	require.Equal(t, s.Members[0], before)
	ls, err := l.TryAcquire(ctx, "fence")
	require.NoError(t, err)
	first := ls.Token()
	require.NoError(t, ls.Release(ctx))

	after, err := s.Failover(ctx)
	require.NoError(t, err)
	require.NotEqual(t, before, after)
	now, err := s.Primary(ctx)
	require.NoError(t, err)
	require.Equal(t, after, now)
	require.Eventually(t, func() bool {
		ls, err = l.TryAcquire(ctx, "fence")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "a grant after the failover: %v", err)
	require.Greater(t, ls.Token(), first, "the token after the failover")
	second := ls.Token()
	require.NoError(t, ls.Release(ctx))

	// The former primary of a Sentinel deployment, killed and restarted,
	// comes back as the new primary's replica, not as a second master.
	if s.Topology == Sentinel {
		require.NoError(t, before.Kill(ctx))
		require.NoError(t, before.Restart(ctx))
		c := goredis.NewClient(&goredis.Options{Addr: before.Addr})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		require.NoError(t, err)
		_, port, _ := net.SplitHostPort(after.Addr)
		require.Contains(t, info, "role:slave\r\n")
		require.Contains(t, info, "master_port:"+port+"\r\n")
	}

	// The last member (a replica of the cluster, a Sentinel) has the
	// hooks, Disconnect aside; the URL grants once it is back.
	m := s.Members[len(s.Members)-1]
	require.NoError(t, m.Pause(ctx))
	require.NoError(t, m.Unpause(ctx))
	require.NoError(t, m.Kill(ctx))
	require.NoError(t, m.Restart(ctx))
	require.ErrorIs(t, m.Disconnect(ctx), errors.ErrUnsupported)
	require.Eventually(t, func() bool {
		ls, err = l.TryAcquire(ctx, "fence")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "a grant after %s's restart: %v", m.Name, err)
	require.Greater(t, ls.Token(), second)
	require.NoError(t, ls.Release(ctx))

	// MoveSlot (the local Sharded topology's), while slot 0's lock is
	// held: the holder goes on, and Primary names the same member.
	if s.Topology != Sharded || s.Provider != Local {
		require.ErrorIs(t, s.MoveSlot(ctx, 0), errors.ErrUnsupported)
		return
	}
	ls, err = l.TryAcquire(ctx, "06S")
	require.NoError(t, err)
	require.NoError(t, s.MoveSlot(ctx, 200*time.Millisecond))
	same, err := s.Primary(ctx)
	require.NoError(t, err)
	require.Equal(t, now, same)
	require.NoError(t, ls.Release(ctx))
}
