package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ClusterNodeTimeout is the cluster-node-timeout of StartCluster's nodes
// (and of conformance/servers' containers): how long a master may not
// answer before its replica may be promoted.
const ClusterNodeTimeout = 2 * time.Second

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Cluster is a sharded Redis Cluster of real redis-server processes on
// 127.0.0.1: masters that split the 16384 hash slots evenly, each with its
// replicas.
type Cluster struct {
	// Masters are the masters as started (a failover changes which node
	// is a master: MasterOf asks the cluster).
	Masters []*Server
	// Replicas[i] are the replicas started for Masters[i].
	Replicas [][]*Server
}

// StartCluster starts masters masters with replicas replicas each, joins
// them into one cluster (CLUSTER ADDSLOTSRANGE, MEET, REPLICATE, as
// redis-cli --cluster create does), waits until every node says
// cluster_state:ok and every replica is in sync, and stops them all when tb
// ends.
func StartCluster(tb testing.TB, masters, replicas int, opts ...Option) *Cluster {
	tb.Helper()
	c := &Cluster{}
	opts = append(opts, func(c *config) { c.cluster = true })
	for range masters {
		c.Masters = append(c.Masters, Start(tb, opts...))
	}
	for range masters {
		var rs []*Server
		for range replicas {
			rs = append(rs, Start(tb, opts...))
		}
		c.Replicas = append(c.Replicas, rs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := JoinCluster(ctx, c.Masters, c.Replicas); err != nil {
		tb.Fatalf("redistest: cluster: %v", err)
	}
	return c
}

// Node is a Redis server that the topology functions (JoinCluster,
// WaitClusterHealthy, MasterOf, ReplicaOf, ClusterFailover,
// WaitSentinels, SentinelsMaster, SentinelsFailover) command: a *Server,
// or a server run elsewhere (conformance/servers' containers) that
// listens on, and announces, its 127.0.0.1 address. It is a type
// constraint.
type Node interface {
	comparable
	// Addr returns the node's 127.0.0.1:port, where clients reach it and
	// which it announces.
	Addr() string
	// BusPort returns a cluster node's cluster bus port.
	BusPort() int
	// Running reports whether the node may answer: the functions skip a
	// node that does not (killed or stopped).
	Running() bool
	// Admin returns a client of the node that its owner keeps (and
	// closes) for these commands.
	Admin() *goredis.Client
}

// JoinCluster makes one Redis Cluster of nodes started with
// cluster-enabled: the masters split the 16384 slots evenly
// (ADDSLOTSRANGE), every node meets the first master, replicas[i] follow
// masters[i] (REPLICATE), as redis-cli --cluster create does; then it
// waits until the cluster is healthy (WaitClusterHealthy).
func JoinCluster[N Node](ctx context.Context, masters []N, replicas [][]N) error {
	per := clusterSlots / len(masters)
	for i, m := range masters {
		lo, hi := i*per, (i+1)*per-1
		if i == len(masters)-1 {
			hi = clusterSlots - 1
		}
		if err := m.Admin().Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("ADDSLOTSRANGE on %s: %w", m.Addr(), err)
		}
	}
	nodes := clusterNodes(masters, replicas)
	first := masters[0]
	host, port, err := net.SplitHostPort(first.Addr())
	if err != nil {
		return err
	}
	for _, n := range nodes[1:] {
		if err := n.Admin().Do(ctx, "CLUSTER", "MEET", host, port, first.BusPort()).Err(); err != nil {
			return fmt.Errorf("MEET from %s: %w", n.Addr(), err)
		}
	}
	for i, rs := range replicas {
		id, err := nodeID(ctx, masters[i])
		if err != nil {
			return err
		}
		for _, r := range rs {
			// A replica can follow a master only once it knows it.
			err := poll(ctx, func(ctx context.Context) error { return r.Admin().Do(ctx, "CLUSTER", "REPLICATE", id).Err() })
			if err != nil {
				return fmt.Errorf("REPLICATE on %s: %w", r.Addr(), err)
			}
		}
	}
	return WaitClusterHealthy(ctx, nodes)
}

// clusterNodes returns masters, then each master's replicas.
func clusterNodes[N Node](masters []N, replicas [][]N) []N {
	ns := slices.Clone(masters)
	for _, rs := range replicas {
		ns = append(ns, rs...)
	}
	return ns
}

// WaitHealthy waits until every running node says cluster_state:ok and
// knows every other node, and every replica's link to its master is up.
func (c *Cluster) WaitHealthy(ctx context.Context) error { return WaitClusterHealthy(ctx, c.Nodes()) }

// WaitClusterHealthy waits until every running node of nodes (all the
// cluster's) says cluster_state:ok and knows every other node, and every
// replica's link to its master is up.
func WaitClusterHealthy[N Node](ctx context.Context, nodes []N) error {
	for _, n := range nodes {
		if !n.Running() {
			continue
		}
		err := poll(ctx, func(ctx context.Context) error {
			info, err := n.Admin().ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(nodes))) {
				return fmt.Errorf("node %s: %s", n.Addr(), strings.Join(strings.Fields(info)[:3], " "))
			}
			role, err := InfoField(ctx, n.Admin(), "role")
			if err != nil || role == "master" {
				return err
			}
			if v, err := InfoField(ctx, n.Admin(), "master_link_status"); err != nil || v != "up" {
				return fmt.Errorf("replica %s: link %q (%v)", n.Addr(), v, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Nodes returns every node, masters first.
func (c *Cluster) Nodes() []*Server { return clusterNodes(c.Masters, c.Replicas) }

// Addrs returns the addresses of every node, masters first: seed
// addresses for a cluster client.
func (c *Cluster) Addrs() []string { return Addrs(c.Nodes()) }

// Addrs returns the nodes' addresses, in order.
func Addrs[N Node](nodes []N) []string {
	var a []string
	for _, n := range nodes {
		a = append(a, n.Addr())
	}
	return a
}

// NewClient returns a cluster client (no retries beyond go-redis's
// redirections, ContextTimeoutEnabled), closed when tb ends.
func (c *Cluster) NewClient(tb testing.TB) *goredis.ClusterClient {
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// MasterOf returns the node that serves key's slot now, as the running
// nodes' CLUSTER SHARDS say.
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Server, error) {
	return MasterOf(ctx, c.Nodes(), key)
}

// MasterOf returns the node of nodes (all the cluster's) that serves
// key's slot now, as the running nodes' CLUSTER SHARDS say.
func MasterOf[N Node](ctx context.Context, nodes []N, key string) (N, error) {
	for _, n := range nodes {
		if !n.Running() {
			continue
		}
		if slot, err := n.Admin().ClusterKeySlot(ctx, key).Result(); err == nil {
			return masterOfSlot(ctx, nodes, slot)
		}
	}
	var zero N
	return zero, errors.New("redistest: no running node knows the key's slot")
}

// masterOfSlot returns the node of nodes (all the cluster's) that serves
// slot now, as the running nodes' CLUSTER SHARDS say.
func masterOfSlot[N Node](ctx context.Context, nodes []N, slot int64) (N, error) {
	var zero N
	for _, n := range nodes {
		if !n.Running() {
			continue
		}
		shards, err := n.Admin().ClusterShards(ctx).Result()
		if err != nil {
			continue
		}
		for _, sh := range shards {
			if !slices.ContainsFunc(sh.Slots, func(r goredis.SlotRange) bool { return r.Start <= slot && slot <= r.End }) {
				continue
			}
			for _, node := range sh.Nodes {
				if node.Role != "master" {
					continue
				}
				port := node.Port
				if node.TLSPort != 0 {
					port = node.TLSPort
				}
				for _, m := range nodes {
					if _, p, _ := net.SplitHostPort(m.Addr()); p == strconv.FormatInt(port, 10) {
						return m, nil
					}
				}
				return zero, fmt.Errorf("redistest: slot %d is served by port %d, not a node of the cluster", slot, port)
			}
		}
	}
	return zero, fmt.Errorf("redistest: no running node knows who serves slot %d", slot)
}

// SlotMasters returns, for each of the 16384 hash slots, the address of
// the master that serves it now, as a running node's CLUSTER SHARDS says
// ("" for a slot no master serves).
func (c *Cluster) SlotMasters(ctx context.Context) ([]string, error) {
	var last error
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		shards, err := n.client().ClusterShards(ctx).Result()
		if err != nil {
			last = err
			continue
		}
		owners := make([]string, clusterSlots)
		for _, sh := range shards {
			for _, node := range sh.Nodes {
				if node.Role != "master" {
					continue
				}
				port := node.Port
				if node.TLSPort != 0 {
					port = node.TLSPort
				}
				addr := net.JoinHostPort("127.0.0.1", strconv.FormatInt(port, 10))
				for _, r := range sh.Slots {
					for slot := r.Start; slot <= r.End && slot < clusterSlots; slot++ {
						owners[slot] = addr
					}
				}
			}
		}
		return owners, nil
	}
	return nil, fmt.Errorf("redistest: no running node answered CLUSTER SHARDS (last: %v)", last)
}

// ReplicaOf returns a running replica that follows master now.
func (c *Cluster) ReplicaOf(ctx context.Context, master *Server) (*Server, error) {
	return ReplicaOf(ctx, c.Nodes(), master)
}

// ReplicaOf returns a running node of nodes that says it is a replica of
// master now (CLUSTER NODES).
func ReplicaOf[N Node](ctx context.Context, nodes []N, master N) (N, error) {
	var zero N
	id, err := nodeID(ctx, master)
	if err != nil {
		return zero, err
	}
	for _, n := range nodes {
		if n == master || !n.Running() {
			continue
		}
		lines, err := n.Admin().ClusterNodes(ctx).Result()
		if err != nil {
			continue
		}
		for _, l := range strings.Split(lines, "\n") {
			f := strings.Fields(l)
			if len(f) > 3 && strings.Contains(f[2], "myself") && strings.Contains(f[2], "slave") && f[3] == id {
				return n, nil
			}
		}
	}
	return zero, fmt.Errorf("redistest: no running replica of %s", master.Addr())
}

// Failover promotes replica to master of its master's slots (CLUSTER
// FAILOVER, with TAKEOVER if force: without the old master's agreement,
// as when it is down or cut off) and waits until replica says it is a
// master.
func (c *Cluster) Failover(ctx context.Context, replica *Server, force bool) error {
	return ClusterFailover(ctx, replica, force)
}

// ClusterFailover promotes replica to master of its master's slots
// (CLUSTER FAILOVER, with TAKEOVER if force: without the old master's
// agreement, as when it is down or cut off) and waits until replica says
// it is a master.
func ClusterFailover[N Node](ctx context.Context, replica N, force bool) error {
	args := []any{"CLUSTER", "FAILOVER"}
	if force {
		args = append(args, "TAKEOVER")
	}
	if err := replica.Admin().Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("redistest: %s on %s: %w", strings.Join(strings.Fields(fmt.Sprint(args...)), " "), replica.Addr(), err)
	}
	return poll(ctx, func(ctx context.Context) error {
		role, err := InfoField(ctx, replica.Admin(), "role")
		if err == nil && role != "master" {
			err = fmt.Errorf("%s is still a %s", replica.Addr(), role)
		}
		return err
	})
}

// NodeID returns the node's cluster id (CLUSTER MYID).
func (s *Server) NodeID(ctx context.Context) (string, error) { return nodeID(ctx, s) }

func nodeID[N Node](ctx context.Context, n N) (string, error) {
	id, err := n.Admin().ClusterMyID(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("redistest: CLUSTER MYID on %s: %w", n.Addr(), err)
	}
	return id, nil
}

// do sends one command to the server.
func (s *Server) do(ctx context.Context, args ...any) error {
	return s.client().Do(ctx, args...).Err()
}

// client returns a client of the server kept for the package's own
// commands, closed by Close.
func (s *Server) client() *goredis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin == nil {
		s.admin = goredis.NewClient(s.options(time.Second))
	}
	return s.admin
}

// Admin returns the client the package keeps for its own commands to the
// server (no retries), closed by Close: do not close it.
func (s *Server) Admin() *goredis.Client { return s.client() }

// BusPort returns the cluster bus port of a node of StartCluster, else 0.
func (s *Server) BusPort() int { return s.busPort }

// Running reports whether the process runs (not killed, not closed; a
// paused one runs).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// poll runs f every 20ms until it succeeds or ctx ends, each run bounded
// by 2s; the error is f's last.
func poll(ctx context.Context, f func(context.Context) error) error {
	for {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(fctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
