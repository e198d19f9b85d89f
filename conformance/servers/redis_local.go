package servers

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/internal/redistest"
)

// localRedisMember is the Member of a local redis-server (or Sentinel).
func localRedisMember(name, role string, srv *redistest.Server) *Member {
	return &Member{Name: name, Addr: srv.Addr(), Role: role, h: hooks{
		stop:  func(context.Context) error { srv.Stop(); return nil },
		kill:  func(context.Context) error { srv.Kill(); return nil },
		pause: func(context.Context) error { return srv.Pause() },
		unpause: func(ctx context.Context) error {
			if err := srv.Resume(); err != nil {
				return err
			}
			return poll(ctx, func(ctx context.Context) error { return redisPing(ctx, srv.Addr()) })
		},
		restart: func(context.Context) error { return srv.Restart() },
	}}
}

// startLocalRedisSentinel starts a primary, its replica and three
// Sentinels (see newSentinelServer).
func startLocalRedisSentinel(t testing.TB) *Server {
	s := redistest.StartSentinels(t, 3)
	members := []*Member{localRedisMember("redis-1", "primary", s.Primary), localRedisMember("redis-2", "replica", s.Replica)}
	for i, sn := range s.Sentinels {
		members = append(members, localRedisMember(fmt.Sprint("sentinel-", i+1), "sentinel", sn))
	}
	return newSentinelServer([]*redistest.Server{s.Primary, s.Replica}, s.Sentinels, members)
}

// startLocalRedisCluster starts a Redis Cluster of three masters with a
// replica each (see newShardedServer).
func startLocalRedisCluster(t testing.TB) *Server {
	c := redistest.StartCluster(t, 3, 1)
	var members []*Member
	for i, n := range c.Nodes() {
		role := "primary"
		if i >= len(c.Masters) {
			role = "replica"
		}
		members = append(members, localRedisMember(fmt.Sprint("redis-", i+1), role, n))
	}
	return newShardedServer(c.Nodes(), members)
}
