package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelMaster is the name under which StartSentinels' Sentinels monitor
// the primary.
const SentinelMaster = "fencelock"

// sentinelDownAfter is the Sentinels' down-after-milliseconds: how long
// the primary may not answer before a failover starts.
const sentinelDownAfter = time.Second

// Sentinels is a primary, its replica and Sentinels that monitor them
// (quorum: a majority of the Sentinels), as real processes on 127.0.0.1.
type Sentinels struct {
	Primary   *Server // as started: after a failover, Master says which
	Replica   *Server
	More      []*Server // the other replicas (StartSentinelsReplicas)
	Sentinels []*Server
}

// StartSentinels starts a primary, a replica and n Sentinels, waits until
// every Sentinel knows the replica and the other Sentinels and reaches
// its quorum (WaitSentinels), and stops them all when tb ends. opts apply
// to the primary and the replica, and WithTLS to the Sentinels too.
func StartSentinels(tb testing.TB, n int, opts ...Option) *Sentinels {
	tb.Helper()
	return StartSentinelsReplicas(tb, n, 1, opts...)
}

// StartSentinelsReplicas is StartSentinels with replicas replicas (1 at
// least): Replica, and More for the others.
func StartSentinelsReplicas(tb testing.TB, n, replicas int, opts ...Option) *Sentinels {
	tb.Helper()
	s := &Sentinels{Primary: Start(tb, opts...)}
	s.Replica = StartReplica(tb, s.Primary, opts...)
	for range replicas - 1 {
		s.More = append(s.More, StartReplica(tb, s.Primary, opts...))
	}
	conf := SentinelConf(s.Primary.Addr(), n)
	var given config // WithTLS applies to the Sentinels too
	for _, o := range opts {
		if o != nil {
			o(&given)
		}
	}
	for range n {
		s.Sentinels = append(s.Sentinels, Start(tb, func(c *config) { c.sentinel, c.tls = conf, given.tls }))
	}
	s.waitKnown(tb)
	return s
}

// waitKnown waits until every Sentinel knows every replica and reaches its
// quorum (SENTINEL CKQUORUM).
func (s *Sentinels) waitKnown(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := WaitSentinels(ctx, s.Sentinels, 1+len(s.More)); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
}

// SentinelConf returns the configuration lines with which each of n
// Sentinels monitors the primary at addr under the name SentinelMaster:
// quorum a majority of them, the primary down after sentinelDownAfter, a
// failover timeout of 10s.
func SentinelConf(addr string, n int) []string {
	host, port, _ := net.SplitHostPort(addr)
	return []string{
		fmt.Sprintf("sentinel monitor %s %s %s %d", SentinelMaster, host, port, n/2+1),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", SentinelMaster, sentinelDownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s 10000", SentinelMaster),
	}
}

// WaitSentinels waits until every Sentinel of sentinels knows want
// replicas of SentinelMaster and reaches its quorum (SENTINEL CKQUORUM: it
// sees enough other Sentinels to authorize a failover).
func WaitSentinels[N Node](ctx context.Context, sentinels []N, want int) error {
	for _, sn := range sentinels {
		err := poll(ctx, func(ctx context.Context) error {
			replicas, err := sn.Admin().Do(ctx, "SENTINEL", "REPLICAS", SentinelMaster).Slice()
			switch {
			case err != nil:
				return err
			case len(replicas) < want:
				return fmt.Errorf("sentinel %s knows %d replicas of %d yet", sn.Addr(), len(replicas), want)
			}
			return sn.Admin().Do(ctx, "SENTINEL", "CKQUORUM", SentinelMaster).Err()
		})
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
	}
	return nil
}

// servers are the primary and replicas, as started.
func (s *Sentinels) servers() []*Server {
	return append([]*Server{s.Primary, s.Replica}, s.More...)
}

// Addrs returns the Sentinels' addresses.
func (s *Sentinels) Addrs() []string { return Addrs(s.Sentinels) }

// Master returns the server the first running Sentinel names as the
// primary now.
func (s *Sentinels) Master(ctx context.Context) (*Server, error) {
	return SentinelsMaster(ctx, s.Sentinels, s.servers())
}

// SentinelsMaster returns the server of servers that the first running
// Sentinel of sentinels names as the primary of SentinelMaster now.
func SentinelsMaster[N Node](ctx context.Context, sentinels, servers []N) (N, error) {
	var zero N
	var last error
	for _, sn := range sentinels {
		if !sn.Running() {
			continue
		}
		addr, err := sn.Admin().Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster).StringSlice()
		if err != nil || len(addr) != 2 {
			last = fmt.Errorf("sentinel %s: %v %v", sn.Addr(), addr, err)
			continue
		}
		for _, m := range servers {
			if m.Addr() == net.JoinHostPort(addr[0], addr[1]) {
				return m, nil
			}
		}
		return zero, fmt.Errorf("redistest: the Sentinels name %s:%s, not one of their servers", addr[0], addr[1])
	}
	return zero, fmt.Errorf("redistest: no running Sentinel names the primary (%v)", last)
}

// Failover asks a Sentinel to fail over (SENTINEL FAILOVER: a replica is
// promoted, the old primary made its replica) and waits until the
// Sentinels name another server and it says it is a master.
func (s *Sentinels) Failover(ctx context.Context) (*Server, error) {
	return SentinelsFailover(ctx, s.Sentinels, s.servers())
}

// SentinelFailoverWait is how long SentinelsFailover waits for the
// Sentinels to name another primary after a SENTINEL FAILOVER they
// accepted before it asks again (a failover that times out is aborted:
// its failover-timeout is 10s), and how long RestartRole waits for a
// failover from a server the Sentinels see down.
const SentinelFailoverWait = 20 * time.Second

// SentinelsFailover asks the first running Sentinel of sentinels to fail
// over (SENTINEL FAILOVER: a replica is promoted, the old primary made its
// replica; asked again while it refuses, as right after a server came
// back: NOGOODSLAVE, and if the Sentinels still name the old primary
// SentinelFailoverWait after it accepted: the failover was aborted) and
// waits until the Sentinels name another server of servers and it says it
// is a master; it returns that server.
func SentinelsFailover[N Node](ctx context.Context, sentinels, servers []N) (N, error) {
	var zero N
	old, err := SentinelsMaster(ctx, sentinels, servers)
	if err != nil {
		return zero, err
	}
	for {
		err = poll(ctx, func(ctx context.Context) error {
			for _, sn := range sentinels {
				if sn.Running() {
					return sn.Admin().Do(ctx, "SENTINEL", "FAILOVER", SentinelMaster).Err()
				}
			}
			return fmt.Errorf("no running Sentinel")
		})
		if err != nil {
			return zero, fmt.Errorf("redistest: SENTINEL FAILOVER: %w", err)
		}
		var now N
		wctx, cancel := context.WithTimeout(ctx, SentinelFailoverWait)
		err = poll(wctx, func(ctx context.Context) error {
			m, err := SentinelsMaster(ctx, sentinels, servers)
			if err != nil {
				return err
			}
			if m == old {
				return fmt.Errorf("the Sentinels still name %s", m.Addr())
			}
			if role, err := InfoField(ctx, m.Admin(), "role"); err != nil || role != "master" {
				return fmt.Errorf("%s is %q (%v)", m.Addr(), role, err)
			}
			now = m
			return nil
		})
		cancel()
		if err == nil || ctx.Err() != nil {
			return now, err
		}
	}
}

// Settled says (nil) whether the servers of a Sentinel deployment are as
// the Sentinels say: the server the first running Sentinel names as the
// primary is a master, and every other running server its replica with
// its link up. After a failover, or after a former primary comes back as
// a master (a paused one, or a real one, with the role it had: see
// RestartRole), Sentinel reconfigures the others, the last one 8s at
// least after it sees it.
func Settled[N Node](ctx context.Context, sentinels, servers []N) error {
	m, err := SentinelsMaster(ctx, sentinels, servers)
	if err != nil {
		return err
	}
	if role, err := InfoField(ctx, m.Admin(), "role"); err != nil || role != "master" {
		return fmt.Errorf("the Sentinels name %s, which is %q (%v)", m.Addr(), role, err)
	}
	for _, n := range servers {
		if n == m || !n.Running() {
			continue
		}
		info, err := n.Admin().Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr(), err)
		}
		host, port, _ := net.SplitHostPort(m.Addr())
		for _, want := range []string{"role:slave", "master_host:" + host, "master_port:" + port, "master_link_status:up"} {
			if !strings.Contains(info, want+"\r\n") {
				return fmt.Errorf("%s is not a replica of %s with its link up yet (no %s)", n.Addr(), m.Addr(), want)
			}
		}
	}
	return nil
}

// RestartRole returns the role in which server n of a Sentinel deployment
// (sentinels monitoring servers) comes back from a restart: replicaOf is
// the address of the primary the Sentinels name now, or "" if they name
// n. A real deployment's server comes back in the role it had (Sentinel
// persists each REPLICAOF it sends with CONFIG REWRITE in the server's
// configuration file), and Sentinel turns a former primary that comes
// back as one into the new primary's replica 8s at least after it sees
// it; this package's servers keep no configuration file, so a restarted
// former primary would be a second master, and a restarted replica would
// follow the primary it was started with (as deployments do that ask the
// Sentinels at start, Bitnami's chart for one).
//
// While the Sentinels name n and see it down (it crashed, and their
// failover is under way), RestartRole waits for the failover, up to
// SentinelFailoverWait, so that n does not come back as a second master
// as it ends; then, n comes back as the primary. The error is ctx's, or
// that no running Sentinel answers.
func RestartRole[N Node](ctx context.Context, sentinels, servers []N, n N) (replicaOf string, err error) {
	deadline := time.Now().Add(SentinelFailoverWait)
	for {
		m, err := SentinelsMaster(ctx, sentinels, servers)
		if err != nil {
			return "", err
		}
		if m != n {
			return m.Addr(), nil
		}
		if !sentinelsSeeDown(ctx, sentinels) || time.Now().After(deadline) {
			return "", nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// SetReplicaOf makes n a replica of the server at addr (REPLICAOF host
// port), or a primary if addr is "" (REPLICAOF NO ONE).
func SetReplicaOf[N Node](ctx context.Context, n N, addr string) error {
	host, port := "NO", "ONE"
	if addr != "" {
		host, port, _ = net.SplitHostPort(addr)
	}
	if err := n.Admin().ReplicaOf(ctx, host, port).Err(); err != nil {
		return fmt.Errorf("redistest: REPLICAOF %s %s on %s: %w", host, port, n.Addr(), err)
	}
	return nil
}

// sentinelsSeeDown says whether the first running Sentinel of sentinels
// flags the primary it names down (s_down, o_down) or a failover of it
// under way.
func sentinelsSeeDown[N Node](ctx context.Context, sentinels []N) bool {
	for _, sn := range sentinels {
		if !sn.Running() {
			continue
		}
		v, err := sn.Admin().Do(ctx, "SENTINEL", "MASTER", SentinelMaster).Result()
		if err != nil {
			return false
		}
		f := fmt.Sprint(field(v, "flags"))
		return strings.Contains(f, "s_down") || strings.Contains(f, "o_down") || strings.Contains(f, "failover")
	}
	return false
}

// sentinelArgs writes the Sentinel's configuration file (Sentinel rewrites
// it as it learns) and returns its command line.
func (s *Server) sentinelArgs() ([]string, error) {
	path := filepath.Join(s.dir, "sentinel-"+strconv.Itoa(s.port)+".conf")
	if _, err := os.Stat(path); err != nil { // a restart keeps what it learnt
		if err := os.WriteFile(path, []byte(strings.Join(s.cfg.sentinel, "\n")+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	a := []string{path, "--sentinel", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--daemonize", "no", "--logfile", s.LogPath()}
	if f := s.cfg.tls; f != nil {
		// TLS only, to clients and to the servers it monitors (with
		// the client certificate they want).
		a = append(a, "--port", "0", "--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey,
			"--tls-ca-cert-file", f.CA, "--tls-auth-clients", "yes", "--tls-replication", "yes",
			"--tls-client-cert-file", f.ClientCert, "--tls-client-key-file", f.ClientKey)
	}
	return a, nil
}

// field returns the value of key in a reply that is a map (RESP3) or a
// flat list of keys and values (RESP2), or nil.
func field(reply any, key string) any {
	switch r := reply.(type) {
	case map[any]any:
		return r[key]
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if r[i] == key {
				return r[i+1]
			}
		}
	}
	return nil
}
