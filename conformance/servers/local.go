package servers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// startLocal starts a single server of kind as a process (or, for etcd, in
// this process) through the internal test helpers, which fail t (never
// skip) when a binary is missing.
func startLocal(t testing.TB, kind Kind) (*Server, error) {
	switch kind {
	case Etcd:
		srv := etcdtest.Start(t)
		addr := strings.TrimPrefix(srv.Endpoints()[0], "http://")
		m := &Member{Name: "etcd", Addr: addr, h: hooks{
			// The embedded server can be closed, not started again.
			stop: func(context.Context) error { srv.Close(); return nil },
		}}
		return &Server{URL: "etcd://" + addr + "/" + prefix(), Members: []*Member{m}}, nil
	case ZooKeeper:
		if zktest.TickTime != ZooKeeperTick {
			return nil, fmt.Errorf("zktest.TickTime %v, want %v", zktest.TickTime, ZooKeeperTick)
		}
		srv := zktest.Start(t)
		ready := func(ctx context.Context) error {
			_, err := zkMode(ctx, srv.Addr())
			return err
		}
		m := &Member{Name: "zookeeper", Addr: srv.Addr(), h: hooks{
			// zktest stops with SIGKILL.
			stop:    func(context.Context) error { srv.Stop(); return nil },
			kill:    func(context.Context) error { srv.Stop(); return nil },
			pause:   func(context.Context) error { srv.Pause(); return nil },
			unpause: func(ctx context.Context) error { srv.Resume(); return poll(ctx, ready) },
			restart: func(context.Context) error { return srv.Restart() },
		}}
		return &Server{URL: "zk://" + srv.Addr() + "/" + prefix(), Members: []*Member{m}}, nil
	case Redis:
		srv := redistest.Start(t)
		ready := func(ctx context.Context) error { return redisPing(ctx, srv.Addr()) }
		m := &Member{Name: "redis", Addr: srv.Addr(), Role: "primary", h: hooks{
			stop:  func(context.Context) error { srv.Stop(); return nil },
			kill:  func(context.Context) error { srv.Kill(); return nil },
			pause: func(context.Context) error { return srv.Pause() },
			unpause: func(ctx context.Context) error {
				if err := srv.Resume(); err != nil {
					return err
				}
				return poll(ctx, ready)
			},
			restart: func(context.Context) error { return srv.Restart() },
		}}
		return &Server{URL: "redis://" + srv.Addr() + "/0?prefix=" + prefix(), Members: []*Member{m}}, nil
	case Postgres:
		c := pgtest.Start(t)
		m := &Member{Name: "postgres", Addr: hostPort("127.0.0.1", c.Port()), h: hooks{
			restart: func(context.Context) error {
				rt := &recordTB{TB: t}
				c.Restart(rt)
				return rt.err
			},
		}}
		return &Server{URL: c.DSN(), Members: []*Member{m}}, nil
	}
	return nil, fmt.Errorf("unknown kind %q", kind)
}

// recordTB turns a Fatalf into an error, for pgtest's Restart, whose
// Fatalf is its last statement.
type recordTB struct {
	testing.TB
	err error
}

func (r *recordTB) Helper() {}

func (r *recordTB) Fatalf(format string, args ...any) { r.err = fmt.Errorf(format, args...) }
