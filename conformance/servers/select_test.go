package servers_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/conformance/servers"
)

// The TestSelect* tests need no server.

func TestSelectExternal(t *testing.T) {
	const u = "etcd://127.0.0.1:1/mine"
	t.Setenv("FENCELOCK_ETCD_URL", u)
	t.Setenv(servers.ProviderEnv, "")
	for _, p := range []servers.Provider{servers.Auto, servers.External} {
		got, err := servers.Resolve(p, servers.Etcd, servers.Cluster)
		require.NoError(t, err)
		require.Equal(t, servers.External, got, "%s with $FENCELOCK_ETCD_URL set", p)
	}
	s := servers.Start(t, servers.Etcd, servers.Single)
	require.Equal(t, servers.External, s.Provider)
	require.Equal(t, u, s.URL)
	require.Empty(t, s.Members)
}

func TestSelectFailures(t *testing.T) {
	t.Setenv("FENCELOCK_REDIS_URL", "")
	for _, c := range []struct {
		name, env string
		p         servers.Provider
		kind      servers.Kind
		topo      servers.Topology
		want      string
	}{
		{"unknown provider", "", "podman", servers.Etcd, servers.Single, `unknown provider "podman" (want external, docker, local or auto)`},
		{"unknown provider in env", "docker,podman", "", servers.Etcd, servers.Single, `$FENCELOCK_PROVIDER="docker,podman": unknown provider "podman"`},
		{"unknown kind", "", servers.Local, "mysql", servers.Single, `unknown kind "mysql"`},
		{"unknown topology", "", servers.Local, servers.Etcd, "ring", `unknown topology "ring"`},
		{"sync not postgres", "", servers.Local, servers.Redis, servers.SyncStandby, "topology sync is a PostgreSQL topology, not one of redis"},
		{"local cluster", "", servers.Local, servers.Etcd, servers.Cluster, "provider local runs single servers only"},
		{"local zookeeper cluster", "", servers.Local, servers.ZooKeeper, servers.Cluster, "a cluster needs docker"},
		{"external unset", "", servers.External, servers.Redis, servers.Single, "provider external: $FENCELOCK_REDIS_URL is not set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(servers.ProviderEnv, c.env)
			failed, msgs := runInner(t, func(tb testing.TB) {
				if c.p == "" {
					servers.Start(tb, c.kind, c.topo)
				} else {
					servers.StartWith(tb, c.p, c.kind, c.topo)
				}
			})
			require.True(t, failed, "the start must fail the test")
			require.Len(t, msgs, 1)
			require.Contains(t, msgs[0], c.want)
		})
	}
}

func TestSelectProvidersFromEnv(t *testing.T) {
	t.Setenv(servers.ProviderEnv, "")
	ps, err := servers.ProvidersFromEnv()
	require.NoError(t, err)
	require.Equal(t, []servers.Provider{servers.Auto}, ps)
	t.Setenv(servers.ProviderEnv, " docker, local ")
	ps, err = servers.ProvidersFromEnv()
	require.NoError(t, err)
	require.Equal(t, []servers.Provider{servers.Docker, servers.Local}, ps)
}
