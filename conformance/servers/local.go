package servers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// startLocal starts a single server of kind as a process (or, for etcd, in
// this process), or for Postgres in the cluster topology a primary and a
// streaming standby, through the internal test helpers, which fail t (never
// skip) when a binary is missing. Clients reach it through a faultproxy
// (the Server's URL and the Member's Addr name the proxy), whose Partition
// and Heal are the Member's Disconnect and Reconnect; the proxy forwards
// to the server's own port, which stays the same over a Restart.
func startLocal(t testing.TB, kind Kind, topo Topology) (*Server, error) {
	switch kind {
	case Etcd:
		srv := etcdtest.Start(t)
		p, err := startProxy(t, strings.TrimPrefix(srv.Endpoints()[0], "http://"))
		if err != nil {
			return nil, err
		}
		ready := func(ctx context.Context) error { return etcdReady(ctx, p.Addr()) }
		m := &Member{Name: "etcd", Addr: p.Addr(), h: hooks{
			// The server runs in this process: it can be stopped and
			// started again (same data, same port), not paused, and a
			// kill is a stop.
			stop: func(context.Context) error { srv.Stop(); return nil },
			kill: func(context.Context) error { srv.Stop(); return nil },
			restart: func(ctx context.Context) error {
				if err := srv.Restart(); err != nil {
					return err
				}
				return poll(ctx, ready)
			},
		}}
		m.h.disconnect, m.h.reconnect = partition(p, ready)
		return &Server{URL: "etcd://" + p.Addr() + "/" + prefix(), Members: []*Member{m}}, nil
	case ZooKeeper:
		if zktest.TickTime != ZooKeeperTick {
			return nil, fmt.Errorf("zktest.TickTime %v, want %v", zktest.TickTime, ZooKeeperTick)
		}
		srv := zktest.Start(t)
		p, err := startProxy(t, srv.Addr())
		if err != nil {
			return nil, err
		}
		readyAt := func(addr string) func(context.Context) error {
			return func(ctx context.Context) error { _, err := zkMode(ctx, addr); return err }
		}
		m := &Member{Name: "zookeeper", Addr: p.Addr(), h: hooks{
			// zktest stops with SIGKILL.
			stop:    func(context.Context) error { srv.Stop(); return nil },
			kill:    func(context.Context) error { srv.Stop(); return nil },
			pause:   func(context.Context) error { srv.Pause(); return nil },
			unpause: func(ctx context.Context) error { srv.Resume(); return poll(ctx, readyAt(srv.Addr())) },
			restart: func(context.Context) error { return srv.Restart() },
		}}
		m.h.disconnect, m.h.reconnect = partition(p, readyAt(p.Addr()))
		return &Server{URL: "zk://" + p.Addr() + "/" + prefix() + zkQuery, Members: []*Member{m}}, nil
	case Redis:
		switch topo {
		case Sentinel:
			return startLocalRedisSentinel(t), nil
		case Sharded:
			return startLocalRedisCluster(t), nil
		}
		srv := redistest.Start(t)
		p, err := startProxy(t, srv.Addr())
		if err != nil {
			return nil, err
		}
		m := localRedisMember("redis", "primary", srv)
		m.Addr = p.Addr()
		m.h.disconnect, m.h.reconnect = partition(p, func(ctx context.Context) error { return redisPing(ctx, p.Addr()) })
		return &Server{URL: "redis://" + p.Addr() + "/0?prefix=" + prefix(), Members: []*Member{m}}, nil
	case Postgres:
		c := pgtest.Start(t)
		if topo == Cluster || topo == SyncStandby {
			return startLocalPostgresPair(t, c, topo == SyncStandby)
		}
		m, dsn, err := localPostgres(t, c, "postgres", "")
		if err != nil {
			return nil, err
		}
		return &Server{URL: dsn, Members: []*Member{m}}, nil
	}
	return nil, fmt.Errorf("unknown kind %q", kind)
}

// localPostgres returns the Member of the local PostgreSQL server c,
// named name, with role, reached through a proxy of its own, and the DSN
// of its postgres database through that proxy.
func localPostgres(t testing.TB, c *pgtest.Cluster, name, role string) (*Member, string, error) {
	p, err := startProxy(t, hostPort("127.0.0.1", c.Port()))
	if err != nil {
		return nil, "", err
	}
	u, err := url.Parse(c.DSN())
	if err != nil {
		return nil, "", err
	}
	u.Host = p.Addr()
	dsn := u.String()
	direct := c.DSN()
	m := &Member{Name: name, Addr: p.Addr(), Role: role, h: hooks{
		stop:  func(context.Context) error { c.Stop(); return nil },
		kill:  func(context.Context) error { return c.Kill() },
		pause: func(context.Context) error { return c.Pause() },
		unpause: func(ctx context.Context) error {
			if err := c.Resume(); err != nil {
				return err
			}
			return poll(ctx, func(ctx context.Context) error { return pgReady(ctx, direct) })
		},
		restart: func(context.Context) error {
			rt := &recordTB{TB: t}
			c.Restart(rt)
			return rt.err
		},
	}}
	m.h.disconnect, m.h.reconnect = partition(p, func(ctx context.Context) error { return pgReady(ctx, dsn) })
	return m, dsn, nil
}

// startLocalPostgresPair starts a streaming standby of the local server c
// (with synchronous, c's synchronous standby): the Server's URL names both, the
// primary first, with target_session_attrs=read-write, so that clients
// follow a promotion (Server.Failover, which pgtest's Follow makes
// repeatable: see pgPair). The standby replicates through a link of its
// own (pgtest.Standby.Link), which a member's Disconnect cuts too.
func startLocalPostgresPair(t testing.TB, c *pgtest.Cluster, synchronous bool) (*Server, error) {
	sb := c.StartStandby(t, synchronous)
	pm, dsn, err := localPostgres(t, c, "postgres-1", "primary")
	if err != nil {
		return nil, err
	}
	sm, _, err := localPostgres(t, sb.Cluster, "postgres-2", "standby")
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	u.Host = pm.Addr + "," + sm.Addr
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	s := &Server{URL: u.String(), Members: []*Member{pm, sm}}
	lp := &localPgPair{clusters: map[*Member]*pgtest.Cluster{pm: c, sm: sb.Cluster}, standby: sb, cut: map[*Member]bool{}}
	t.Cleanup(lp.close)
	pair := &pgPair{s: s,
		promote: func(ctx context.Context, _ *Member) error { return lp.promote(ctx) },
		follow: func(ctx context.Context, m, primary *Member) error {
			return lp.follow(ctx, m, primary, synchronous)
		},
	}
	for _, m := range s.Members {
		m.h.restart = pair.restartHook(m, m.h.restart)
		m.h.disconnect, m.h.reconnect = lp.partition(m, m.h.disconnect, m.h.reconnect)
	}
	s.primary, s.failover, s.replication = pair.primary, pair.failover, lp.replication
	return s, nil
}

// localPgPair is what a local PostgreSQL primary and standby need to fail
// over again and again: each member's cluster, and the standby's
// replication link, which is cut while a member is disconnected or the
// replication is cut (Server.CutReplication).
type localPgPair struct {
	mu       sync.Mutex
	clusters map[*Member]*pgtest.Cluster
	standby  *pgtest.Standby // nil between a promotion and the rebuild
	cut      map[*Member]bool
	replCut  bool
}

// promote promotes the standby; its link to the old primary goes.
func (lp *localPgPair) promote(ctx context.Context) error {
	lp.mu.Lock()
	sb := lp.standby
	lp.mu.Unlock()
	if sb == nil {
		return errors.New("no standby")
	}
	if err := sb.PromoteContext(ctx); err != nil {
		return err
	}
	lp.mu.Lock()
	lp.standby = nil
	lp.mu.Unlock()
	sb.Link.Close()
	return nil
}

// follow rebuilds m's cluster as a standby of primary's; its replication
// is not cut (unless a member is cut off).
func (lp *localPgPair) follow(ctx context.Context, m, primary *Member, sync bool) error {
	sb, err := lp.clusters[m].Follow(ctx, lp.clusters[primary], sync)
	if err != nil {
		return err
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.standby, lp.replCut = sb, false
	lp.linkLocked()
	return nil
}

// linkLocked partitions the standby's link while a member is cut off or
// the replication is cut, and heals it otherwise.
func (lp *localPgPair) linkLocked() {
	switch {
	case lp.standby == nil:
	case len(lp.cut) > 0 || lp.replCut:
		lp.standby.Link.Partition()
	default:
		lp.standby.Link.Heal()
	}
}

// replication cuts or heals the standby's replication alone.
func (lp *localPgPair) replication(cut bool) error {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.standby == nil {
		return errors.New("no standby")
	}
	lp.replCut = cut
	lp.linkLocked()
	return nil
}

// partition returns m's Disconnect and Reconnect, which also cut and heal
// the standby's replication link (healed once no member is cut off).
func (lp *localPgPair) partition(m *Member, disconnect, reconnect func(context.Context) error) (func(context.Context) error, func(context.Context) error) {
	link := func(cut bool) {
		lp.mu.Lock()
		defer lp.mu.Unlock()
		if cut {
			lp.cut[m] = true
		} else {
			delete(lp.cut, m)
		}
		lp.linkLocked()
	}
	return func(ctx context.Context) error {
			link(true)
			return disconnect(ctx)
		}, func(ctx context.Context) error {
			link(false)
			return reconnect(ctx)
		}
}

// close closes the standby's link (pgtest closes the first one too).
func (lp *localPgPair) close() {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.standby != nil {
		lp.standby.Link.Close()
	}
}

// startProxy starts a faultproxy to target and closes it when t ends
// (before the server stops: cleanups run last first).
func startProxy(t testing.TB, target string) (*faultproxy.Proxy, error) {
	p, err := faultproxy.Start(target)
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	t.Cleanup(p.Close)
	return p, nil
}

// partition returns the disconnect and reconnect hooks of a member behind
// p: Partition, and Heal then wait until ready answers through p.
func partition(p *faultproxy.Proxy, ready func(context.Context) error) (disconnect, reconnect func(context.Context) error) {
	disconnect = func(context.Context) error { p.Partition(); return nil }
	reconnect = func(ctx context.Context) error { p.Heal(); return poll(ctx, ready) }
	return disconnect, reconnect
}

// recordTB turns a Fatalf into an error, for pgtest's Restart, whose
// Fatalf is its last statement.
type recordTB struct {
	testing.TB
	err error
}

func (r *recordTB) Helper() {}

func (r *recordTB) Fatalf(format string, args ...any) { r.err = fmt.Errorf(format, args...) }
