package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
)

// Nodes returns the addresses (host:port) that a Locker opened from rawURL
// may dial, as the servers say now: the URL's hosts and, for a
// redis+sentinel URL, the primary, its replicas and the other Sentinels
// that the Sentinels know, or, for a redis+cluster URL, every node of the
// cluster (the union of every node's CLUSTER NODES). A failover moves the primary among them; a
// node added later is not listed. For firewall rules, and for the fault
// campaign, which puts a proxy in front of each. Errors match
// backend.ErrInvalidURL or backend.ErrUnavailable.
func Nodes(ctx context.Context, rawURL string) ([]string, error) {
	u, err := checkedURL(rawURL)
	if err != nil {
		return nil, err
	}
	ep, _, err := parseEndpoint(u)
	if err != nil {
		return nil, err
	}
	opt := ep.opt
	opt.ContextTimeoutEnabled = true
	opt.Dialer = new(dialLog).dialer(opt, &clientLog{}, nil) // go-redis's lines about its dials: nowhere
	nodes := slices.Clone(ep.addrs)
	add := func(host, port string) {
		if a := net.JoinHostPort(host, port); !slices.Contains(nodes, a) {
			nodes = append(nodes, a)
		}
	}
	unavailable := func(err error) error {
		return fmt.Errorf("%w: redis: the nodes of %s: %w", backend.ErrUnavailable, ep.where(), err)
	}
	switch ep.topo {
	case sentinel:
		var errs []error
		for _, a := range ep.addrs {
			err := sentinelNodes(ctx, ep, opt, a, add)
			if err == nil {
				return nodes, nil
			}
			errs = append(errs, err)
		}
		return nil, unavailable(errors.Join(errs...))
	case cluster:
		c := goredis.NewClusterClient(ep.clusterOptions())
		defer c.Close()
		c.AddHook(logHook{&clientLog{}})
		// A node that is down is left out; what the others know of it
		// is not.
		var mu sync.Mutex
		var errs []error
		answered := false
		_ = c.ForEachShard(ctx, func(ctx context.Context, n *goredis.Client) error {
			lines, err := n.ClusterNodes(ctx).Result()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return nil
			}
			answered = true
			for _, l := range strings.Split(lines, "\n") {
				// <id> <ip:port@cport[,hostname]> <flags> ...
				f := strings.Fields(l)
				if len(f) < 3 || strings.Contains(f[2], "noaddr") {
					continue
				}
				addr, _, _ := strings.Cut(f[1], "@")
				if host, port, err := net.SplitHostPort(addr); err == nil && host != "" && port != "0" {
					add(host, port)
				}
			}
			return nil
		})
		if !answered {
			return nil, unavailable(errors.Join(errs...))
		}
	}
	return nodes, nil
}

// sentinelNodes asks the Sentinel at addr for the primary, the replicas
// and the other Sentinels of ep's master, and adds each.
func sentinelNodes(ctx context.Context, ep endpoint, opt *goredis.Options, addr string, add func(host, port string)) error {
	c := goredis.NewSentinelClient(&goredis.Options{Addr: addr, Username: ep.sentinelUser, Password: ep.sentinelPassword,
		Dialer: opt.Dialer, DialTimeout: opt.DialTimeout, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	c.AddHook(logHook{&clientLog{}})
	primary, err := c.GetMasterAddrByName(ctx, ep.masterName).Result()
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if len(primary) != 2 {
		return fmt.Errorf("%s: master %q: %v", addr, ep.masterName, primary)
	}
	add(primary[0], primary[1])
	for _, ask := range []func(context.Context, string) *goredis.MapStringStringSliceCmd{c.Replicas, c.Sentinels} {
		ms, err := ask(ctx, ep.masterName).Result()
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		for _, m := range ms {
			add(m["ip"], m["port"])
		}
	}
	return nil
}
