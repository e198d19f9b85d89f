package servers

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/internal/redistest"
)

// Readiness checks: each talks the server's protocol and makes one real
// request, bounded by a few seconds.

const probeTimeout = 3 * time.Second

// etcdReady makes a linearizable read through the member at addr alone,
// which needs a leader and a quorum.
func etcdReady(ctx context.Context, addr string) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, DialTimeout: probeTimeout, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err = c.Get(ctx, "fencelock-servers-ready", clientv3.WithCountOnly())
	return err
}

// zkMode sends the srvr four-letter word and returns the server's mode
// (leader, follower, standalone; observer).
func zkMode(ctx context.Context, addr string) (string, error) {
	out, err := zk4lw(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode: "); ok {
			return m, nil
		}
	}
	return "", fmt.Errorf("srvr: no mode in %q", strings.TrimSpace(out))
}

func zk4lw(ctx context.Context, addr, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// redisProbe runs probe with a client of its own of the server at addr,
// bounded by probeTimeout.
func redisProbe(ctx context.Context, addr string, probe func(context.Context, *goredis.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: probeTimeout,
		ReadTimeout: probeTimeout, WriteTimeout: probeTimeout, PoolSize: 1})
	defer c.Close()
	return probe(ctx, c)
}

// redisPing sends PING.
func redisPing(ctx context.Context, addr string) error {
	return redisProbe(ctx, addr, func(ctx context.Context, c *goredis.Client) error { return c.Ping(ctx).Err() })
}

// redisReplicaReady says whether the replica's link to the primary is up
// and the primary counts it for WAIT.
func redisReplicaReady(ctx context.Context, primary, replica string) error {
	return redisProbe(ctx, replica, func(ctx context.Context, r *goredis.Client) error {
		if v, err := redistest.InfoField(ctx, r, "master_link_status"); err != nil || v != "up" {
			return fmt.Errorf("replica link %q (%v)", v, err)
		}
		// Within the replica probe's time: its ctx bounds this one.
		return redisProbe(ctx, primary, func(ctx context.Context, p *goredis.Client) error {
			if err := p.Incr(ctx, "fencelock-servers-ready").Err(); err != nil {
				return err
			}
			n, err := p.Do(ctx, "WAIT", 1, 500).Int64()
			if err != nil {
				return err
			}
			if n < 1 {
				return fmt.Errorf("WAIT 1: %d replicas acknowledged", n)
			}
			return nil
		})
	})
}

// redisIsPrimary says whether the server at addr is a primary.
func redisIsPrimary(ctx context.Context, addr string) error {
	return redisProbe(ctx, addr, func(ctx context.Context, c *goredis.Client) error {
		role, err := redistest.InfoField(ctx, c, "role")
		if err != nil {
			return err
		}
		if role != "master" {
			return fmt.Errorf("%s is a %s", addr, role)
		}
		return nil
	})
}

// sentinelPrimary asks the Sentinel at addr for the primary's host.
func sentinelPrimary(ctx context.Context, addr string) (host string, err error) {
	err = redisProbe(ctx, addr, func(ctx context.Context, c *goredis.Client) error {
		v, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster).StringSlice()
		if err != nil {
			return err
		}
		if len(v) != 2 {
			return fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: %q", v)
		}
		host = v[0]
		return nil
	})
	return host, err
}

// sentinelReady says whether the Sentinel at addr names primary and knows
// a healthy replica (or a failover would find none).
func sentinelReady(ctx context.Context, addr, primary string) error {
	host, err := sentinelPrimary(ctx, addr)
	if err != nil {
		return err
	}
	if host != primary {
		return fmt.Errorf("the Sentinel names %q as the primary, want %q", host, primary)
	}
	return redisProbe(ctx, addr, func(ctx context.Context, c *goredis.Client) error {
		rs, err := c.Do(ctx, "SENTINEL", "REPLICAS", SentinelMaster).Slice()
		if err != nil {
			return err
		}
		for _, r := range rs {
			if fields := replicaFields(r); fields["flags"] == "slave" && fields["master-link-status"] == "ok" {
				return nil
			}
		}
		return fmt.Errorf("the Sentinel knows no healthy replica yet: %v", rs)
	})
}

// replicaFields turns one entry of SENTINEL REPLICAS (a flat list of
// name, value, or a map under RESP3) into a map.
func replicaFields(r any) map[string]string {
	m := map[string]string{}
	switch v := r.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			m[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	case map[any]any:
		for k, x := range v {
			m[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	}
	return m
}

// sentinelFailover sends SENTINEL FAILOVER.
func sentinelFailover(ctx context.Context, addr string) error {
	return redisProbe(ctx, addr, func(ctx context.Context, c *goredis.Client) error {
		return c.Do(ctx, "SENTINEL", "FAILOVER", SentinelMaster).Err()
	})
}

// pgReady connects and runs SELECT 1.
func pgReady(ctx context.Context, dsn string) error { return pgSelectWithin(ctx, dsn, probeTimeout) }

// pgSelectWithin connects and runs SELECT 1 within d.
func pgSelectWithin(ctx context.Context, dsn string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("SELECT 1 returned %d", n)
	}
	return nil
}

// pgExec connects to dsn and runs stmt, within probeTimeout.
func pgExec(ctx context.Context, dsn, stmt string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, stmt)
	return err
}

// pgTrue connects to dsn and runs query, which returns one boolean: an
// error unless it is true.
func pgTrue(ctx context.Context, dsn, query string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var yes bool
	if err := c.QueryRow(ctx, query).Scan(&yes); err != nil {
		return err
	}
	if !yes {
		return fmt.Errorf("%s: false", query)
	}
	return nil
}
