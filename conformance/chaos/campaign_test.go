package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/conformance/chaos"
	"github.com/fencelock/fencelock/conformance/servers"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// logWriter sends the campaign's progress lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// outDir is where a campaign writes its files: under
// $FENCELOCK_CHAOS_OUT/name if set (to look at them afterwards), else in a
// directory removed when t ends.
func outDir(t *testing.T) string {
	if base := os.Getenv("FENCELOCK_CHAOS_OUT"); base != "" {
		dir := base + "/" + strings.ReplaceAll(t.Name(), "/", "_")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return dir
	}
	return t.TempDir()
}

// run runs c and logs its table.
func run(t *testing.T, c chaos.Config) (*chaos.Result, error) {
	c.Log = logWriter{t}
	c.Out = outDir(t)
	c.Worker = os.Getenv(binEnv)
	ctx, cancel := context.WithTimeout(context.Background(), c.MaxDuration+3*time.Minute)
	defer cancel()
	res, err := chaos.Run(ctx, c)
	if res != nil {
		var b strings.Builder
		_ = res.Summary.WriteText(&b)
		t.Logf("campaign in %s:\n%s", res.Dir, b.String())
	}
	return res, err
}

// binEnv names a fencelock binary (scripts/test builds one, without the
// race detector) for the campaigns' workers to run instead of this test
// binary: the campaigns check what faults do, and five race-instrumented
// workers per campaign cost the CPU that the other tests beside them
// need. Unset: the workers are this test binary, re-executed.
const binEnv = "FENCELOCK_BIN"

// grantsEnv sets TestCampaign's minimum of grants per backend (default
// 1000): docs/chaos.md's longer campaign sets 10000.
const grantsEnv = "FENCELOCK_CHAOS_GRANTS"

// minGrants reads $FENCELOCK_CHAOS_GRANTS.
func minGrants(t *testing.T) int {
	s := os.Getenv(grantsEnv)
	if s == "" {
		return 1000
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, "$%s", grantsEnv)
	require.Positive(t, n, "$%s", grantsEnv)
	return n
}

// sentinelOf describes the Sentinel of a Redis cluster of the suite's: the
// containers announce their names, reached at their published ports.
func sentinelOf(s *servers.Server) *chaos.Sentinel {
	sn := &chaos.Sentinel{Master: servers.SentinelMaster, Hosts: map[string]string{},
		Failover: func(ctx context.Context) error { _, err := s.Failover(ctx); return err }}
	for _, m := range s.Members {
		if m.Role == "sentinel" {
			sn.Addr = m.Addr
		} else {
			sn.Hosts[m.Name+":6379"] = m.Addr
		}
	}
	return sn
}

// roleMember is the member that has a role (the leader, the primary, …)
// when a member fault begins: String finds it with find (the nemesis names
// its target first), and the fault's hooks act on it. Failovers and
// elections move the roles.
type roleMember struct {
	role string
	find func(context.Context) (*servers.Member, error)
	cur  *servers.Member
}

func (r *roleMember) String() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if r.cur, err = r.find(ctx); err != nil {
		r.cur = nil
		return fmt.Sprintf("the %s? (%v)", r.role, err)
	}
	return fmt.Sprintf("%s (the %s)", r.cur.Name, r.role)
}

func (r *roleMember) do(f func(*servers.Member) error) error {
	if r.cur == nil {
		return fmt.Errorf("no member was the %s", r.role)
	}
	return f(r.cur)
}

func (r *roleMember) Kill(ctx context.Context) error {
	return r.do(func(m *servers.Member) error { return m.Kill(ctx) })
}

func (r *roleMember) Restart(ctx context.Context) error {
	return r.do(func(m *servers.Member) error { return m.Restart(ctx) })
}

func (r *roleMember) Pause(ctx context.Context) error {
	return r.do(func(m *servers.Member) error { return m.Pause(ctx) })
}

func (r *roleMember) Unpause(ctx context.Context) error {
	return r.do(func(m *servers.Member) error { return m.Unpause(ctx) })
}

// leaderAndFollower are an etcd or ZooKeeper cluster's leader and a
// follower (the member after the leader), as they are when a fault begins.
func leaderAndFollower(s *servers.Server) []chaos.ServerMember {
	follower := func(ctx context.Context) (*servers.Member, error) {
		lead, err := s.Leader(ctx)
		if err != nil {
			return nil, err
		}
		return s.Members[(slices.Index(s.Members, lead)+1)%len(s.Members)], nil
	}
	return []chaos.ServerMember{&roleMember{role: "leader", find: s.Leader}, &roleMember{role: "follower", find: follower}}
}

// primaryAndStandby are a PostgreSQL pair's members whose Role is
// "primary" and "standby" when a fault begins.
func primaryAndStandby(s *servers.Server) []chaos.ServerMember {
	var ms []chaos.ServerMember
	for _, role := range []string{"primary", "standby"} {
		ms = append(ms, &roleMember{role: role, find: func(context.Context) (*servers.Member, error) {
			for _, m := range s.Members {
				if m.Role == role {
					return m, nil
				}
			}
			return nil, errors.New("none")
		}})
	}
	return ms
}

// primaryAndReplica are the primary of a Redis deployment that fails
// over (s.Primary: the server the Sentinels name, or slot 0's master) and
// the other server of pair (that primary as started and its replica) when
// a fault begins.
func primaryAndReplica(s *servers.Server, pair [2]*servers.Member) []chaos.ServerMember {
	replica := func(ctx context.Context) (*servers.Member, error) {
		p, err := s.Primary(ctx)
		switch {
		case err != nil:
			return nil, err
		case p == pair[0]:
			return pair[1], nil
		case p == pair[1]:
			return pair[0], nil
		}
		return nil, fmt.Errorf("the primary is %s, not %s or %s", p.Name, pair[0].Name, pair[1].Name)
	}
	return []chaos.ServerMember{&roleMember{role: "primary", find: s.Primary}, &roleMember{role: "replica", find: replica}}
}

// TestCampaign is CI's bounded campaign: on each backend, on the suite's
// own servers (a cluster where the provider is Docker, else a single
// server), at least 1,000 fenced grants ($FENCELOCK_CHAOS_GRANTS) with
// every fault kind injected at least 3 times, member faults included on a
// cluster; no violation.
//
//	etcd       guard etcdfence on the same cluster; members: the leader and
//	           a follower, in turn
//	ZooKeeper  guard sqlfence on PostgreSQL; members: the leader and a
//	           follower, in turn
//	PostgreSQL guard sqlfence on a second PostgreSQL; members: the server
//	           itself, single (grants stop while it is down; the tokens
//	           must grow across its kills)
//
// Redis twice with a client of its own (client faults, guard redisfence
// on the server; the docs' client on a Sentinel, with its failovers),
// and, named by their URLs, on local deployments that fail over (see
// failoverCampaignOn): a Redis primary with its replica and three
// Sentinels (redis/sentinel), a Redis Cluster (redis/sharded), and a
// PostgreSQL primary with its asynchronous standby (postgres/cluster:
// kill + promote, every other failover losing the primary's last
// commits). Redis's member faults are the failover campaigns': the
// primary and its replica as they are when each fault begins.
//
// campaignsAtOnce is how many campaigns TestCampaign runs at once: each
// has five workers hammering one lock and a cluster of servers. Three at
// once starved the tests beside them on CI's two cores (a Docker ZooKeeper
// ensemble of the conformance package stopped answering for minutes, and
// the campaigns themselves took twice as long); one at a time took 8
// minutes, the run's longest package by far (a campaign is about 85s,
// mostly faults waiting out their TTLs); two at once. TestCampaign runs in
// parallel with TestCampaignOverTLS (a short one, on one local Redis), so
// for its 20s or so three campaigns run.
const campaignsAtOnce = 2

func TestCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the campaigns run in the full run (scripts/test)")
	}
	t.Parallel() // beside the package's other long tests: the package is the full run's longest path
	providers, err := servers.ProvidersFromEnv()
	require.NoError(t, err)
	p := providers[0]
	type campaign struct {
		kind   servers.Kind
		client chaos.RedisClient
		topo   servers.Topology // "": the kind's cluster with Docker, else single
	}
	campaigns := []campaign{{kind: servers.Etcd}, {kind: servers.ZooKeeper}, {kind: servers.Postgres},
		// Client configurations matter as much as servers: a go-redis
		// client built as the redis package's docs show (on a cluster, the
		// Sentinel's failover client, with failovers of the primary), and
		// one without ContextTimeoutEnabled (go-redis's default), whose
		// calls may outlive their contexts. Client faults (and failovers),
		// half the grants.
		{kind: servers.Redis, client: chaos.RedisClientDocs},
		{kind: servers.Redis, client: chaos.RedisClientNoContextTimeout},
		// The Redis deployments that fail over by themselves, named by
		// their URLs (local processes): a primary, its replica and three
		// Sentinels, and a Redis Cluster. The Sentinel deployment's
		// campaign replaced the one on the Docker primary + replica
		// (member faults on the replica, wait_replicas=1), whose faults
		// it covers, so that the run stays as long.
		{kind: servers.Redis, topo: servers.Sentinel},
		{kind: servers.Redis, topo: servers.Sharded},
		// A PostgreSQL primary and its asynchronous standby, named by
		// their multi-host URL, failed over (kill + promote) again and
		// again (local processes).
		{kind: servers.Postgres, topo: servers.Cluster}}
	slots := make(chan struct{}, campaignsAtOnce)
	var wg sync.WaitGroup
	for _, cp := range campaigns {
		name := string(cp.kind)
		if cp.client != "" {
			name += "/" + string(cp.client)
		}
		if cp.topo != "" {
			name += "/" + string(cp.topo)
		}
		slots <- struct{}{}
		wg.Add(1)
		// t.Run from goroutines of its own: campaignsAtOnce at once,
		// whatever -parallel says.
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			t.Run(name, func(t *testing.T) {
				if cp.topo != "" {
					failoverCampaignOn(t, cp.kind, cp.topo)
					return
				}
				campaignOn(t, p, cp.kind, cp.client)
			})
		}()
	}
	wg.Wait()
}

// runClean runs campaign c and requires what TestCampaign wants of each:
// at least grants grants, every fault kind at least 3 times, no stale
// write accepted, no lost update, no token anomaly, a linearizable
// history.
func runClean(t *testing.T, c chaos.Config, grants int) {
	res, err := run(t, c)
	require.NoError(t, err)
	sum := res.Summary
	assert.GreaterOrEqual(t, sum.Grants, grants)
	for _, f := range c.Faults {
		assert.GreaterOrEqual(t, sum.Faults[f], 3, "%s faults", f)
	}
	assert.Zero(t, sum.StaleWritesAccepted)
	assert.Zero(t, sum.LostUpdates)
	assert.Zero(t, sum.TokenAnomalies)
	assert.Equal(t, "ok", sum.Linearizable)
}

// failoverCampaignOn runs TestCampaign's campaign on a topology that
// fails over, named by its URL (local processes): the workers reach every
// node through proxies of their own, with the client faults, member
// faults (kill and pause) on the two servers of the lock's data, and
// failovers. The guard is on a PostgreSQL server of its own.
//
// A Redis topology (servers.Sentinel or servers.Sharded: chaos puts a
// proxy in front of each address redis.Nodes lists): the member faults
// are on the primary and its replica as they are when the fault begins
// (on the cluster, those of slot 0, where the lock name "06S" lives; a
// restarted Sentinel deployment's server comes back as the replica of
// the primary the Sentinels name), the failovers SENTINEL FAILOVER or
// CLUSTER FAILOVER TAKEOVER, on the cluster slot moves of the lock's slot
// too (servers.Server.MoveSlot), the clock floor alone keeping tokens
// growing.
//
// A PostgreSQL primary and its asynchronous standby (servers.Cluster: a
// proxy per host of the multi-host URL): the member faults are on the
// primary and on the standby as they are when the fault begins, the
// failovers kill the primary and promote the standby (Server.Failover,
// which rebuilds the old primary as the new one's standby); the tokens'
// clock floor keeps a promoted standby, which may have missed the last
// grants, from handing their tokens out again.
func failoverCampaignOn(t *testing.T, kind servers.Kind, topo servers.Topology) {
	s := servers.StartWith(t, servers.Local, kind, topo)
	grants := minGrants(t)
	// The PostgreSQL pair granted 10 to 18 a second here (at a load of
	// 15 to 30 on two cores): a 10,000-grant run needs more than 500s.
	c := chaos.Config{URL: s.URL, Name: "06S", MinGrants: grants, MinFaults: 3, Duration: 20 * time.Second,
		HoldMax:     50 * time.Millisecond,
		MaxDuration: max(10*time.Minute, time.Duration(grants/8)*time.Second),
		Guard:       chaos.GuardSQL, GuardURL: servers.StartWith(t, servers.Local, servers.Postgres, servers.Single).URL,
		Faults:   append(slices.Clone(chaos.ClientFaults), chaos.Member, chaos.Failover),
		Failover: func(ctx context.Context) error { _, err := s.Failover(ctx); return err },
	}
	if kind == servers.Postgres {
		c.Members = primaryAndStandby(s)
		c.TTL = 2 * time.Second
		c.Failover = pgFailover(t, s, c.TTL)
		runClean(t, c, grants)
		return
	}
	if topo == servers.Sharded {
		// The lock's slot moves to another master, stopped halfway,
		// and back (so that the member faults stay on its master and
		// replica). Three faults more, with quiet gaps of 1.25s
		// instead of the TTL, keep the campaign's length (measured at
		// a load of 12 to 20: 76s without them; with them, 94s at the
		// default gap, 84s at 1.5s, 76s at 1.25s, with 1,000 grants
		// still within the faults' time).
		c.Faults = append(c.Faults, chaos.SlotMove)
		c.SlotMove = s.MoveSlot
		c.FaultGap = 1250 * time.Millisecond // the TTL is 2s
	}
	// The primary and its replica as they are when a fault begins:
	// failovers (and, after a kill or pause of the primary, the
	// deployment itself) swap them.
	pair := [2]*servers.Member{s.Members[0], s.Members[1]}
	if topo == servers.Sharded {
		pair[1] = s.Members[3] // redis-4 replicates redis-1, slot 0's master
	}
	primary, err := s.Primary(context.Background())
	require.NoError(t, err)
	require.Equal(t, pair[0], primary)
	c.Members = primaryAndReplica(s, pair)
	runClean(t, c, grants)
}

// pgFailover is the Failover fault of a PostgreSQL primary and its
// asynchronous standby: every other one (the first included) loses the
// primary's last commits, the standby's replication cut (CutReplication)
// for half a TTL of grants and renewals before the primary is killed and
// the standby promoted; the others promote a standby that is caught up.
func pgFailover(t *testing.T, s *servers.Server, ttl time.Duration) func(context.Context) error {
	n := 0
	return func(ctx context.Context) error {
		n++
		if n%2 == 1 {
			t.Logf("failover %d: the standby's replication cut for %v first", n, ttl/2)
			if err := s.CutReplication(ctx); err != nil {
				return err
			}
			select {
			case <-time.After(ttl / 2):
			case <-ctx.Done():
				return errors.Join(ctx.Err(), s.HealReplication(ctx))
			}
		}
		_, err := s.Failover(ctx)
		return err
	}
}

// campaignOn runs TestCampaign's campaign on kind with client (for Redis;
// "" is the URL's own client).
func campaignOn(t *testing.T, p servers.Provider, kind servers.Kind, client chaos.RedisClient) {
	topo := servers.Single
	// PostgreSQL's member faults here are on a single server: its tokens
	// must grow across its own crashes (a standby's promotions are the
	// postgres/cluster campaign's).
	if got, err := servers.Resolve(p, kind, servers.Cluster); err == nil && got == servers.Docker && kind != servers.Postgres {
		topo = servers.Cluster
	}
	s := servers.StartWith(t, p, kind, topo)
	grants := minGrants(t)
	// A busy machine grants 20 a second at least. Holds of up to
	// 50ms (the default is 10ms): the faults set the campaign's
	// length, and 1,000 grants come well within it, so there is
	// no use in five workers hammering the lock faster, only CPU
	// taken from the tests beside it.
	c := chaos.Config{URL: s.URL, MinGrants: grants, MinFaults: 3, Duration: 20 * time.Second,
		HoldMax:     50 * time.Millisecond,
		MaxDuration: max(10*time.Minute, time.Duration(grants/20)*time.Second)}
	u, err := url.Parse(s.URL)
	require.NoError(t, err)
	switch kind {
	case servers.Etcd:
		c.Guard = chaos.GuardEtcd
		c.GuardURL = "http://" + strings.ReplaceAll(u.Host, ",", ",http://")
	case servers.ZooKeeper, servers.Postgres:
		c.Guard = chaos.GuardSQL
		c.GuardURL = servers.StartWith(t, p, servers.Postgres, servers.Single).URL
	case servers.Redis:
		c.Guard = chaos.GuardRedis
		u.RawQuery = ""
		c.GuardURL = u.String()
	}
	switch {
	case kind == servers.Redis:
		for _, m := range s.Members {
			if m.Role == "replica" {
				c.Members = append(c.Members, m)
			}
		}
	case topo == servers.Cluster: // the leader, then a follower, in turn
		c.Members = leaderAndFollower(s)
	case kind == servers.Postgres: // single, on any provider
		c.Members = []chaos.ServerMember{s.Members[0]}
	}
	if len(c.Members) > 0 {
		c.Faults = append(slices.Clone(chaos.ClientFaults), chaos.Member)
	}
	if client != "" {
		c.RedisClient, c.Faults, c.Members = client, chaos.ClientFaults, nil
		grants /= 2
		c.MinGrants = grants
	}
	if client == chaos.RedisClientDocs && topo == servers.Cluster {
		// Failovers of the primary, with the clock floor alone:
		// with wait_replicas=1 and one replica, grants stop after
		// each failover until the old primary is a replica again,
		// which Sentinel does 8 s at least after it sees it (up to
		// 12 s measured here; redis.BenchmarkFailoverGap), and the
		// member faults of the other Redis campaign show already. The
		// guard must not be on a primary that fails over.
		c.Guard, c.GuardURL = chaos.GuardSQL, servers.StartWith(t, p, servers.Postgres, servers.Single).URL
		c.Sentinel = sentinelOf(s)
		c.Faults = append(slices.Clone(chaos.ClientFaults), chaos.Failover)
		lu, err := url.Parse(s.URL)
		require.NoError(t, err)
		q := lu.Query()
		q.Del("wait_replicas")
		q.Del("wait_timeout") // it bounds the wait for replicas: not without one
		lu.RawQuery = q.Encode()
		c.URL = lu.String()
	}
	runClean(t, c, grants)
}

// A campaign over rediss://, TLS-only servers with client certificates:
// the workers dial their proxies through the Redis client's dial hook and
// check each server's certificate against its own address, so the client
// faults reach a TLS connection. (etcds:// and zks:// are refused.)
func TestCampaignOverTLS(t *testing.T) {
	t.Parallel()
	f := tlstest.New(t)
	srv := redistest.Start(t, redistest.WithTLS(f))
	q := url.Values{"cacert": {f.CA}, "cert": {f.ClientCert}, "key": {f.ClientKey}, "prefix": {"chaos-tls"}}
	c := chaos.Config{URL: "rediss://" + srv.Addr() + "/0?" + q.Encode(), Workers: 3, Duration: 12 * time.Second,
		MinFaults: 1, MaxDuration: time.Minute}
	res, err := run(t, c)
	require.NoError(t, err)
	sum := res.Summary
	assert.Positive(t, sum.Grants)
	for _, f := range chaos.ClientFaults {
		assert.GreaterOrEqual(t, sum.Faults[f], 1, "%s faults", f)
	}
	assert.Zero(t, sum.StaleWritesAccepted)
	assert.Equal(t, "ok", sum.Linearizable)
}
