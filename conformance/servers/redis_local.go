package servers

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
	return newSentinelServer([]*redistest.Server{s.Primary, s.Replica}, s.Sentinels, members,
		func(_ context.Context, n *redistest.Server, replicaOf string) error {
			return n.RestartReplicaOf(replicaOf)
		})
}

// startLocalRedisCluster starts a Redis Cluster of three masters with a
// replica each (see newShardedServer); MoveSlot moves slot 0 to another
// master, stopped midway with half its keys moved, and back.
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
	srv := newShardedServer(c.Nodes(), members)
	srv.moveSlot = func(ctx context.Context, midway time.Duration) error {
		from, err := c.MasterOf(ctx, slot0Key)
		if err != nil {
			return err
		}
		m, err := c.StartMigration(ctx, 0, nil)
		if err != nil {
			return err
		}
		keys, err := m.Remaining(ctx, 1000)
		if err != nil {
			return err
		}
		if err := m.Move(ctx, keys[:len(keys)/2]...); err != nil {
			return err
		}
		t := time.NewTimer(midway)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if err := m.Finish(ctx); err != nil {
			return err
		}
		_, err = c.MoveSlot(ctx, 0, from)
		return err
	}
	return srv
}

// MoveSlot moves the slot of the Sharded topology's lock data (slot 0, of
// the key "{06S}", whose master Primary names) to another master, and
// back to the same master: the first move, as redis-cli --cluster reshard
// does (CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE, SETSLOT NODE),
// but stopped halfway for midway (or until ctx ends), with half the slot's
// keys moved; the move back at once. Meanwhile the slot's multi-key
// commands, which every script of a lock is, meet TRYAGAIN (or ASK, MOVED).
// Primary names the same member after it. Another Server's MoveSlot
// returns an error matching errors.ErrUnsupported.
func (s *Server) MoveSlot(ctx context.Context, midway time.Duration) error {
	if s.moveSlot == nil {
		return fmt.Errorf("servers: MoveSlot: %s %s via %s: %w", s.Kind, s.Topology, s.Provider, errors.ErrUnsupported)
	}
	if err := s.moveSlot(ctx, midway); err != nil {
		return fmt.Errorf("servers: MoveSlot: %w", err)
	}
	return nil
}
