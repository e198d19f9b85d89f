package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/internal/redistest"
)

// The Docker provider's Redis Sentinel and Sharded topologies run on the
// host's network (see hostSpec): each server listens on 127.0.0.1 ports
// picked here and announces 127.0.0.1:port (replica-announce-*,
// cluster-announce-*, sentinel announce-*), so that the addresses the
// Sentinels and CLUSTER SHARDS name are ones a client on the host can dial
// (and the URL harness can put its proxies in front of). What they do is
// the local topologies' code (redis_topology.go, internal/redistest), over
// dockerRedis nodes.

// dockerRedis is a Redis container on the host's network: a
// redistest.Node.
type dockerRedis struct {
	c     *container
	admin *goredis.Client
}

// Addr returns the client address, 127.0.0.1:port.
func (n *dockerRedis) Addr() string { return n.c.addr() }

// BusPort returns a cluster node's bus port, else 0.
func (n *dockerRedis) BusPort() int {
	if len(n.c.ports) < 2 {
		return 0
	}
	return n.c.ports[1]
}

// Running reports whether the container runs and is not paused.
func (n *dockerRedis) Running() bool {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	st, err := n.c.inspect(ctx)
	return err == nil && st.State.Running && !st.State.Paused
}

// Admin returns the node's client for the topology functions, closed
// when the test ends.
func (n *dockerRedis) Admin() *goredis.Client { return n.admin }

// redisOnHost runs the container name on the host's network: with cluster
// a cluster node (a client port and a bus port), else a server that, with
// primary set, replicates the server at that address. It waits until the
// server answers as itself: a pidfile of its name's.
func (d *dockerServer) redisOnHost(name string, cluster bool, primary string) (*dockerRedis, error) {
	pidfile := "/tmp/" + name + ".pid"
	ports := 1
	if cluster {
		ports = 2
	}
	c, err := d.run(containerSpec{name: name, cport: "6379/tcp", host: &hostSpec{
		ports: ports,
		cmd: func(ports []int) []string {
			port := strconv.Itoa(ports[0])
			args := []string{"redis-server", "--port", port, "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--protected-mode", "no",
				"--repl-diskless-sync-delay", "0", "--pidfile", pidfile,
				"--replica-announce-ip", "127.0.0.1", "--replica-announce-port", port}
			if cluster {
				bus := strconv.Itoa(ports[1])
				args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
					"--cluster-node-timeout", strconv.Itoa(int(redistest.ClusterNodeTimeout.Milliseconds())),
					"--cluster-port", bus, "--cluster-announce-ip", "127.0.0.1",
					"--cluster-announce-port", port, "--cluster-announce-bus-port", bus)
			}
			if primary != "" {
				host, pport, _ := strings.Cut(primary, ":")
				args = append(args, "--replicaof", host, pport)
			}
			return args
		},
		ready: func(c *container) func(context.Context) error {
			return func(ctx context.Context) error { return redisIs(ctx, c.addr(), "pidfile", pidfile) }
		},
	}})
	if err != nil {
		return nil, err
	}
	return d.redisNode(c), nil
}

// sentinelOnHost runs the Sentinel container name on the host's network,
// monitoring the primary at addr with n-1 other Sentinels. It waits until
// the Sentinel answers as itself: an id of its own (sentinel myid).
func (d *dockerServer) sentinelOnHost(name, primary string, n int) (*dockerRedis, error) {
	id := randomHex(20)
	c, err := d.run(containerSpec{name: name, cport: "26379/tcp", host: &hostSpec{
		ports: 1,
		cmd: func(ports []int) []string {
			port := strconv.Itoa(ports[0])
			conf := append([]string{
				"port " + port,
				"bind 127.0.0.1",
				"protected-mode no",
				"sentinel myid " + id,
				"sentinel announce-ip 127.0.0.1",
				"sentinel announce-port " + port,
			}, redistest.SentinelConf(primary, n)...)
			return []string{"sh", "-c", `printf '%s' "$0" > /tmp/sentinel.conf; exec redis-server /tmp/sentinel.conf --sentinel`,
				strings.Join(conf, "\n") + "\n"}
		},
		ready: func(c *container) func(context.Context) error {
			return func(ctx context.Context) error { return redisIs(ctx, c.addr(), "sentinel", id) }
		},
	}})
	if err != nil {
		return nil, err
	}
	return d.redisNode(c), nil
}

// redisNode returns c's node, with a client closed when the test ends.
func (d *dockerServer) redisNode(c *container) *dockerRedis {
	admin := goredis.NewClient(&goredis.Options{Addr: c.addr(), MaxRetries: -1, DialTimeout: probeTimeout,
		ReadTimeout: probeTimeout, WriteTimeout: probeTimeout, PoolSize: 2})
	d.t.Cleanup(func() { _ = admin.Close() })
	return &dockerRedis{c: c, admin: admin}
}

// redisIs says whether the server at addr is the one whose pidfile (what
// "pidfile") or Sentinel id (what "sentinel") is want.
func redisIs(ctx context.Context, addr, what, want string) error {
	// Nothing listens yet while the container starts: a plain dial says
	// so without go-redis's log line for each refused dial.
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	return redisProbe(ctx, addr, func(ctx context.Context, c *goredis.Client) error {
		var got string
		var err error
		if what == "sentinel" {
			got, err = c.Do(ctx, "SENTINEL", "MYID").Text()
		} else {
			var m map[string]string
			m, err = c.ConfigGet(ctx, what).Result()
			got = m[what]
		}
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s: another server answers (its %s is %q, not %q)", addr, what, got, want)
		}
		return nil
	})
}

// runAll runs f(i) for i < n at once and returns their results in order.
func runAll[T any](n int, f func(i int) (T, error)) ([]T, error) {
	out := make([]T, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = f(i)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// startRedisSentinel runs a primary, its replica and three Sentinels on
// the host's network (see newSentinelServer), and waits until every
// Sentinel knows the replica and reaches its quorum. The Sentinels start
// once the replica is in sync, as the local ones do: a Sentinel learns of
// replicas from the primary's INFO, which it asks for every 10s.
func (d *dockerServer) startRedisSentinel() (*Server, error) {
	const sentinels = 3
	p, err := d.redisOnHost(d.name(1), false, "")
	if err != nil {
		return nil, err
	}
	r, err := d.redisOnHost(d.name(2), false, p.Addr())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	if err := poll(ctx, func(ctx context.Context) error { return redisReplicaReady(ctx, p.Addr(), r.Addr()) }); err != nil {
		return nil, fmt.Errorf("replica %s: %w; its last lines:\n%s", r.c.name, err, r.c.logs(30))
	}
	sns, err := runAll(sentinels, func(i int) (*dockerRedis, error) {
		return d.sentinelOnHost(d.name(3+i), p.Addr(), sentinels)
	})
	if err != nil {
		return nil, err
	}
	if err := redistest.WaitSentinels(ctx, sns, 1); err != nil {
		return nil, err
	}
	members := []*Member{p.c.newMember("primary"), r.c.newMember("replica")}
	for _, sn := range sns {
		members = append(members, sn.c.newMember("sentinel"))
	}
	// A container comes back with its command line (redis-2 a replica
	// of redis-1), so its role is set once it answers.
	restart := map[*dockerRedis]func(context.Context) error{p: members[0].h.restart, r: members[1].h.restart}
	return newSentinelServer([]*dockerRedis{p, r}, sns, members,
		func(ctx context.Context, n *dockerRedis, replicaOf string) error {
			if err := restart[n](ctx); err != nil {
				return err
			}
			return redistest.SetReplicaOf(ctx, n, replicaOf)
		}), nil
}

// startRedisSharded runs a Redis Cluster of three masters with a replica
// each on the host's network (see newShardedServer), joined as the local
// one is (redistest.JoinCluster).
func (d *dockerServer) startRedisSharded() (*Server, error) {
	const masters = 3
	nodes, err := runAll(2*masters, func(i int) (*dockerRedis, error) { return d.redisOnHost(d.name(i+1), true, "") })
	if err != nil {
		return nil, err
	}
	var replicas [][]*dockerRedis
	for _, r := range nodes[masters:] {
		replicas = append(replicas, []*dockerRedis{r})
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	if err := redistest.JoinCluster(ctx, nodes[:masters], replicas); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	var members []*Member
	for i, n := range nodes {
		role := "primary"
		if i >= masters {
			role = "replica"
		}
		members = append(members, n.c.newMember(role))
	}
	return newShardedServer(nodes, members), nil
}
