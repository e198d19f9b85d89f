package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// clusterNodeTimeout is the Redis Cluster nodes' cluster-node-timeout: how
// long a master may not answer before its replica may be promoted.
const clusterNodeTimeout = 2 * time.Second

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
	if err := c.create(ctx); err != nil {
		tb.Fatalf("redistest: cluster: %v", err)
	}
	return c
}

// create assigns the slots, introduces the nodes and makes the replicas.
func (c *Cluster) create(ctx context.Context) error {
	per := clusterSlots / len(c.Masters)
	for i, m := range c.Masters {
		lo, hi := i*per, (i+1)*per-1
		if i == len(c.Masters)-1 {
			hi = clusterSlots - 1
		}
		if err := m.do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			return fmt.Errorf("ADDSLOTSRANGE on %s: %w", m.Addr(), err)
		}
	}
	first := c.Masters[0]
	for _, n := range c.Nodes()[1:] {
		if err := n.do(ctx, "CLUSTER", "MEET", "127.0.0.1", first.port, first.busPort); err != nil {
			return fmt.Errorf("MEET from %s: %w", n.Addr(), err)
		}
	}
	for i, rs := range c.Replicas {
		id, err := c.Masters[i].NodeID(ctx)
		if err != nil {
			return err
		}
		for _, r := range rs {
			// A replica can follow a master only once it knows it.
			err := poll(ctx, func(ctx context.Context) error { return r.do(ctx, "CLUSTER", "REPLICATE", id) })
			if err != nil {
				return fmt.Errorf("REPLICATE on %s: %w", r.Addr(), err)
			}
		}
	}
	return c.WaitHealthy(ctx)
}

// WaitHealthy waits until every running node says cluster_state:ok and
// knows every other node, and every replica's link to its master is up.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	nodes := c.Nodes()
	for _, n := range nodes {
		if !n.running() {
			continue
		}
		err := poll(ctx, func(ctx context.Context) error {
			info, err := n.client().ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(nodes))) {
				return fmt.Errorf("node %s: %s", n.Addr(), strings.Join(strings.Fields(info)[:3], " "))
			}
			role, err := InfoField(ctx, n.client(), "role")
			if err != nil || role == "master" {
				return err
			}
			if v, err := InfoField(ctx, n.client(), "master_link_status"); err != nil || v != "up" {
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
func (c *Cluster) Nodes() []*Server {
	ns := append([]*Server(nil), c.Masters...)
	for _, rs := range c.Replicas {
		ns = append(ns, rs...)
	}
	return ns
}

// Addrs returns the addresses of every node, masters first: seed
// addresses for a cluster client.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes() {
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
	slot, err := c.Slot(ctx, key)
	if err != nil {
		return nil, err
	}
	return c.masterOfSlot(ctx, int64(slot))
}

// SlotMasters returns, for each of the 16384 hash slots, the address of
// the master that serves it now, as a running node's CLUSTER SHARDS says
// ("" for a slot no master serves).
func (c *Cluster) SlotMasters(ctx context.Context) ([]string, error) {
	var last error
	for _, n := range c.Nodes() {
		if !n.running() {
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
	id, err := master.NodeID(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes() {
		if n == master || !n.running() {
			continue
		}
		lines, err := n.client().ClusterNodes(ctx).Result()
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
	return nil, fmt.Errorf("redistest: no running replica of %s", master.Addr())
}

// Failover promotes replica to master of its master's slots (CLUSTER
// FAILOVER, with TAKEOVER if force: without the old master's agreement,
// as when it is down or cut off) and waits until replica says it is a
// master.
func (c *Cluster) Failover(ctx context.Context, replica *Server, force bool) error {
	args := []any{"CLUSTER", "FAILOVER"}
	if force {
		args = append(args, "TAKEOVER")
	}
	if err := replica.do(ctx, args...); err != nil {
		return fmt.Errorf("redistest: %s on %s: %w", strings.Join(strings.Fields(fmt.Sprint(args...)), " "), replica.Addr(), err)
	}
	return poll(ctx, func(ctx context.Context) error {
		role, err := InfoField(ctx, replica.client(), "role")
		if err == nil && role != "master" {
			err = fmt.Errorf("%s is still a %s", replica.Addr(), role)
		}
		return err
	})
}

// NodeID returns the node's cluster id (CLUSTER MYID).
func (s *Server) NodeID(ctx context.Context) (string, error) {
	id, err := s.client().ClusterMyID(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("redistest: CLUSTER MYID on %s: %w", s.Addr(), err)
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

// running reports whether the process runs (not killed, not closed).
func (s *Server) running() bool {
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
