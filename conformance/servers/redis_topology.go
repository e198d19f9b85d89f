package servers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fencelock/fencelock/internal/redistest"
)

// The Redis topologies whose clients find their servers through the
// servers themselves (the Sentinels name the primary, the cluster lists its
// nodes), local processes or containers on the host's network alike: the
// Server's URL names the Sentinels or the cluster's nodes, and the clients
// then dial the 127.0.0.1 addresses the servers announce, so no proxy of
// this package sits in front of them (the URL harness puts its own in
// front of every address a Locker dials). Members' Disconnect is
// unsupported.

// newSentinelServer returns the Server of a Redis Sentinel deployment:
// servers (the primary as started, then its replica) and the Sentinels
// that monitor them, whose Members are members, in that order (servers,
// then Sentinels). Its URL is redis+sentinel:// over the Sentinels;
// Primary is the server the Sentinels name, and Failover a SENTINEL
// FAILOVER once the deployment is settled (redistest.Settled). A server's Restart brings it back in the role the Sentinels
// give it (redistest.RestartRole: a replica of the primary they name, or
// that primary), through restartAs(ctx, n, replicaOf) ("": as a primary).
func newSentinelServer[N redistest.Node](servers, sentinels []N, members []*Member,
	restartAs func(ctx context.Context, n N, replicaOf string) error) *Server {
	member := memberOf(append(slices.Clone(servers), sentinels...), members)
	for i, n := range servers {
		members[i].h.restart = func(ctx context.Context) error {
			replicaOf, err := redistest.RestartRole(ctx, sentinels, servers, n)
			if err != nil {
				return err
			}
			return restartAs(ctx, n, replicaOf)
		}
	}
	srv := &Server{
		URL: "redis+sentinel://" + strings.Join(redistest.Addrs(sentinels), ",") +
			"/0?master_name=" + redistest.SentinelMaster + "&prefix=" + prefix(),
		Members: members,
	}
	srv.primary = func(ctx context.Context) (*Member, error) {
		n, err := redistest.SentinelsMaster(ctx, sentinels, servers)
		if err != nil {
			return nil, err
		}
		return member(n), nil
	}
	srv.failover = func(ctx context.Context) (*Member, error) {
		// Once the deployment is settled, as an operator would ask: a
		// SENTINEL FAILOVER while a former primary is still a master
		// (after a pause, until Sentinel turns it into a replica) never
		// completed once.
		if err := poll(ctx, func(ctx context.Context) error { return redistest.Settled(ctx, sentinels, servers) }); err != nil {
			return nil, fmt.Errorf("before SENTINEL FAILOVER: %w", err)
		}
		n, err := redistest.SentinelsFailover(ctx, sentinels, servers)
		if err != nil {
			return nil, err
		}
		return member(n), nil
	}
	return srv
}

// slot0Key is a key of hash slot 0 (CLUSTER KEYSLOT {06S} = 0), whose
// master is a sharded Server's Primary.
const slot0Key = "{06S}"

// newShardedServer returns the Server of a Redis Cluster: nodes (the
// masters as started, then the replicas), whose Members are members, in
// that order. Its URL is redis+cluster:// over every node; Primary is the
// master of slot 0, and Failover promotes that master's replica (CLUSTER
// FAILOVER TAKEOVER) and waits until the cluster names it the slot's
// master.
func newShardedServer[N redistest.Node](nodes []N, members []*Member) *Server {
	member := memberOf(nodes, members)
	srv := &Server{
		URL:     "redis+cluster://" + strings.Join(redistest.Addrs(nodes), ",") + "?prefix=" + prefix(),
		Members: members,
	}
	srv.primary = func(ctx context.Context) (*Member, error) {
		n, err := redistest.MasterOf(ctx, nodes, slot0Key)
		if err != nil {
			return nil, err
		}
		return member(n), nil
	}
	srv.failover = func(ctx context.Context) (*Member, error) {
		m, err := redistest.MasterOf(ctx, nodes, slot0Key)
		if err != nil {
			return nil, err
		}
		r, err := redistest.ReplicaOf(ctx, nodes, m)
		if err != nil {
			return nil, err
		}
		if err := redistest.ClusterFailover(ctx, r, true); err != nil {
			return nil, err
		}
		// The node Primary asks may learn of the takeover a moment later.
		err = poll(ctx, func(ctx context.Context) error {
			now, err := redistest.MasterOf(ctx, nodes, slot0Key)
			if err == nil && now != r {
				err = fmt.Errorf("the cluster still names %s the master of slot 0", now.Addr())
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("after CLUSTER FAILOVER TAKEOVER on %s: %w", r.Addr(), err)
		}
		return member(r), nil
	}
	return srv
}

// memberOf returns the lookup from nodes[i] to members[i].
func memberOf[N redistest.Node](nodes []N, members []*Member) func(N) *Member {
	m := make(map[N]*Member, len(nodes))
	for i, n := range nodes {
		m[n] = members[i]
	}
	return func(n N) *Member { return m[n] }
}
