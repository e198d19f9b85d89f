package servers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/conformance/servers"
)

// The TestDocker* tests need a Docker engine and the images: they fail
// without them (see the package documentation).

func hookCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestDockerEtcdCluster(t *testing.T) {
	servers.SkipDockerInShort(t)
	t.Parallel()
	s := servers.StartWith(t, servers.Docker, servers.Etcd, servers.Cluster)
	require.Equal(t, servers.Docker, s.Provider)
	require.Len(t, s.Members, 3)
	ctx := hookCtx(t)
	lockWorks(t, s.URL, 1)

	m := s.Members[2]
	require.NoError(t, m.Pause(ctx))
	lockWorks(t, s.URL, 5)
	require.NoError(t, m.Unpause(ctx))

	require.NoError(t, m.Kill(ctx))
	lockWorks(t, s.URL, 5)
	require.NoError(t, m.Restart(ctx), "the killed member rejoins")
	lockWorks(t, "etcd://"+m.Addr+"/restarted", 1)

	require.NoError(t, m.Stop(ctx))
	require.NoError(t, m.Restart(ctx), "the stopped member rejoins")

	require.NoError(t, m.Disconnect(ctx))
	lockWorks(t, s.URL, 5)
	require.NoError(t, m.Reconnect(ctx), "the cut-off member is back")
	lockWorks(t, "etcd://"+m.Addr+"/reconnected", 1)
}

func TestDockerZooKeeperEnsemble(t *testing.T) {
	servers.SkipDockerInShort(t)
	t.Parallel()
	s := servers.StartWith(t, servers.Docker, servers.ZooKeeper, servers.Cluster)
	require.Len(t, s.Members, 3)
	ctx := hookCtx(t)
	lockWorks(t, s.URL, 1)

	f := follower(t, s)
	require.NoError(t, f.Stop(ctx))
	lockWorks(t, s.URL, 3)
	require.NoError(t, f.Restart(ctx), "the stopped follower rejoins")
	lockWorks(t, "zk://"+f.Addr+"/restarted", 1)
}

// follower returns a member of the ensemble that is not its leader.
func follower(t *testing.T, s *servers.Server) *servers.Member {
	for _, m := range s.Members {
		if mode := zkMode(t, m.Addr); mode == "follower" {
			return m
		}
	}
	t.Fatal("no follower in the ensemble")
	return nil
}

func TestDockerRedisFailover(t *testing.T) {
	servers.SkipDockerInShort(t)
	t.Parallel()
	s := servers.StartWith(t, servers.Docker, servers.Redis, servers.Cluster)
	require.Len(t, s.Members, 3)
	ctx := hookCtx(t)
	lockWorks(t, s.URL, 1) // wait_replicas=1: the replica acknowledges

	old, err := s.Primary(ctx)
	require.NoError(t, err)
	require.Equal(t, s.Members[0], old)
	require.NoError(t, old.Kill(ctx))
	start := time.Now()
	p, err := s.WaitPrimary(ctx, old)
	require.NoError(t, err)
	require.Equal(t, s.Members[1], p, "the Sentinel promotes the replica")
	t.Logf("the Sentinel promoted %s (%s) %v after the primary was killed", p.Name, p.Addr, time.Since(start).Round(time.Millisecond))
	lockWorks(t, "redis://"+p.Addr+"/0?prefix=after-failover", 1)

	// The old primary comes back as a replica of the new one; a requested
	// failover hands the role back.
	require.NoError(t, old.Restart(ctx))
	back, err := s.Failover(ctx)
	require.NoError(t, err)
	require.Equal(t, old, back)
	t.Logf("SENTINEL FAILOVER made %s the primary again", back.Name)
}

func TestDockerPostgres(t *testing.T) {
	servers.SkipDockerInShort(t)
	t.Parallel()
	s := servers.StartWith(t, servers.Docker, servers.Postgres, servers.Single)
	require.Equal(t, servers.Docker, s.Provider)
	require.Len(t, s.Members, 1)
	require.True(t, strings.HasPrefix(s.URL, "postgres://"), s.URL)
	pgHooksWork(t, s)
}

func TestDockerSingles(t *testing.T) {
	servers.SkipDockerInShort(t)
	t.Parallel()
	for _, k := range servers.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			s := servers.StartWith(t, servers.Docker, k, servers.Single)
			require.Len(t, s.Members, 1)
			lockWorks(t, s.URL, 1)
		})
	}
}

// TestDockerCleanup checks that a Server's containers and network are gone
// once the test that started it ended, passed or failed, also those on
// the host's network.
func TestDockerCleanup(t *testing.T) {
	servers.SkipDockerInShort(t)
	t.Parallel()
	pool, err := dockertest.NewPool("")
	require.NoError(t, err)
	// A failed test's cleanup of a topology on the host's network too.
	for _, run := range []struct {
		topo servers.Topology
		fail bool
	}{{servers.Cluster, false}, {servers.Cluster, true}, {servers.Sharded, true}} {
		topo, fail := run.topo, run.fail
		var s *servers.Server
		failed, msgs := runInner(t, func(tb testing.TB) {
			s = servers.StartWith(tb, servers.Docker, servers.Redis, topo)
			if fail {
				tb.Fatalf("a deliberate failure")
			}
		})
		require.Equal(t, fail, failed, "%v", msgs)
		require.NotNil(t, s)
		require.NotEmpty(t, s.Members)
		for _, m := range s.Members {
			cs, err := pool.Client.ListContainers(dc.ListContainersOptions{All: true, Filters: map[string][]string{"name": {m.Name}}})
			require.NoError(t, err)
			require.Empty(t, cs, "container %s is still there", m.Name)
		}
		network := strings.TrimSuffix(s.Members[0].Name, "-1")
		ns, err := pool.Client.FilteredListNetworks(dc.NetworkFilterOpts{"name": {network: true}})
		require.NoError(t, err)
		require.Empty(t, ns, "network %s is still there", network)
	}
}

func TestDockerHooksUnsupportedOnExternal(t *testing.T) {
	servers.SkipDockerInShort(t)
	s := &servers.Server{}
	_, err := s.Primary(context.Background())
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// TestDockerAutoPicksDocker: with no external URL set and the engine and
// images here, auto takes Docker, for clusters too (Postgres has none).
func TestDockerAutoPicksDocker(t *testing.T) {
	servers.SkipDockerInShort(t)
	for _, k := range servers.Kinds {
		t.Setenv(servers.URLEnv[k], "")
		topo := servers.Cluster
		if k == servers.Postgres {
			topo = servers.Single
		}
		got, err := servers.Resolve(servers.Auto, k, topo)
		require.NoError(t, err)
		require.Equal(t, servers.Docker, got, "%s", k)
	}
}

// Leader names one member of an etcd cluster and of a ZooKeeper ensemble,
// the same one every member agrees on; killing it makes another lead.
func TestDockerLeader(t *testing.T) {
	servers.SkipDockerInShort(t)
	for _, kind := range []servers.Kind{servers.Etcd, servers.ZooKeeper} {
		t.Run(string(kind), func(t *testing.T) {
			s := servers.StartWith(t, servers.Docker, kind, servers.Cluster)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			first, err := s.Leader(ctx)
			require.NoError(t, err)
			require.NoError(t, first.Kill(ctx))
			require.Eventually(t, func() bool {
				next, err := s.Leader(ctx)
				return err == nil && next != first
			}, time.Minute, 200*time.Millisecond, "another member leads once %s is killed", first.Name)
		})
	}
	_, err := (&servers.Server{Kind: servers.Redis}).Leader(context.Background())
	require.ErrorIs(t, err, errors.ErrUnsupported)
}
