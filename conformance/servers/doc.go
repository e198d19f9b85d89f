// Package servers starts the servers that the conformance suite (and any
// other test) runs against, from one of three providers, and gives each
// member of a cluster fault hooks: Stop, Kill, Pause, Unpause, Restart,
// Disconnect and Reconnect.
//
//	func TestMine(t *testing.T) {
//		s := servers.Start(t, servers.Etcd, servers.Cluster) // removed when t ends
//		l, err := backend.Open(ctx, s.URL)                  // etcd://127.0.0.1:p1,…/fencelock-servers-…
//		…
//		require.NoError(t, s.Members[0].Kill(ctx))            // the others keep the quorum
//		…
//		require.NoError(t, s.Members[0].Restart(ctx))         // back, same data, same port, ready
//	}
//
// # Providers
//
// Start takes the provider from $FENCELOCK_PROVIDER (the first entry if it
// lists several, e.g. "docker,local"; default auto); StartWith takes it as
// an argument.
//
//   - external: your own server, from FENCELOCK_ETCD_URL, FENCELOCK_ZK_URL,
//     FENCELOCK_REDIS_URL (fencelock URLs with explicit ports) or
//     FENCELOCK_POSTGRES_URL (a DSN). The Server has no Members.
//   - docker: containers of the images in DefaultImages, each overridable
//     ($FENCELOCK_ETCD_IMAGE, $FENCELOCK_ZOOKEEPER_IMAGE,
//     $FENCELOCK_REDIS_IMAGE, $FENCELOCK_POSTGRES_IMAGE), run through
//     github.com/ory/dockertest. An image is pulled only when the engine
//     does not have it. Every Server gets a private network of its own;
//     containers have unique names and the labels in Label*, and each
//     client port is published on a free 127.0.0.1 port chosen here, so it
//     stays the same over a Restart. Redis's Sentinel and Sharded
//     topologies run on the host's network instead: each server listens
//     on free 127.0.0.1 ports chosen here (the same over a Restart) and
//     announces 127.0.0.1:port (replica-announce-ip/port,
//     cluster-announce-ip/port/bus-port, sentinel announce-ip/port), so
//     that the addresses the Sentinels and CLUSTER SHARDS name are ones a
//     client on the host can dial; a container whose server could not
//     bind its port (another process took it) starts again on others.
//     Containers and the network are removed
//     when the test ends (failed or not) and on SIGINT/SIGTERM, and every
//     first start in a process removes those of test processes of this
//     host that no longer run (a killed run).
//   - local: processes on this machine, single servers (and a PostgreSQL
//     primary with its standby, and Redis's Sentinel and Sharded
//     topologies): an embedded
//     etcd (internal/etcdtest), Debian's zookeeper (internal/zktest),
//     redis-server (internal/redistest) and postgresql (internal/pgtest).
//     A missing binary fails the test. Clients reach each server through
//     a TCP proxy on 127.0.0.1 (internal/faultproxy; the Server's URL and
//     the Member's Addr name it), so every local member has Disconnect and
//     Reconnect: the proxy stops forwarding, both ways, and keeps every
//     connection open, as a network partition does (requests time out,
//     nothing is closed), until Reconnect. Besides, members have the
//     hooks those helpers have: etcd Stop/Kill (both a stop: it runs in
//     this process, so it cannot be killed or paused) and Restart;
//     ZooKeeper Stop/Kill (both SIGKILL), Pause, Unpause, Restart; Redis
//     Stop, Kill, Pause, Unpause, Restart; Postgres Stop (a fast
//     shutdown), Kill (SIGKILL to the postmaster and every server
//     process), Pause and Unpause (SIGSTOP and SIGCONT to them all),
//     Restart.
//   - auto: external if the kind's URL variable is set, else docker if the
//     engine answers and has the image (or can pull it), else local. It
//     logs which it took and why.
//
// Start never skips: if the provider cannot start the server (no Docker
// engine, an image that cannot be had, a missing binary, a cluster asked of
// local), it fails the test with the reason. A hook a provider cannot do
// returns an error matching errors.ErrUnsupported.
//
// # Topologies
//
// Single is one server. Cluster is a 3-member etcd cluster, a 3-server
// ZooKeeper ensemble, a Redis primary, replica and Sentinel (quorum 1,
// primary down after 1s; see Server.Primary and Server.Failover), or a
// PostgreSQL primary and an asynchronous streaming standby (made with
// pg_basebackup; Docker and local), Members in that order with Roles
// "primary" and "standby", whose URL names both hosts, the primary first,
// with target_session_attrs=read-write: Server.Failover kills the primary,
// promotes the standby, which the URL then reaches, and rebuilds the old
// primary as its standby (a fresh pg_basebackup on the same address), so
// it can fail over again and again; the Roles follow. SyncStandby
// (PostgreSQL only) is that pair with a synchronous standby
// (synchronous_standby_names): every commit waits until the standby has
// flushed it. A member's Disconnect also cuts the standby's replication
// from the primary.
//
// Sentinel (Redis only, Docker and local) is a primary, its replica and
// three Sentinels (quorum 2, primary down after 1s), named by a
// redis+sentinel URL over the Sentinels: Server.Primary is the server the
// Sentinels name, Server.Failover a SENTINEL FAILOVER. Sharded (Redis
// only, Docker and local) is a Redis Cluster of three masters with a
// replica each (cluster-node-timeout 2s), named by a redis+cluster URL over
// every node: Server.Primary is the master of slot 0, Server.Failover a
// CLUSTER FAILOVER TAKEOVER on its replica. Members are in that order
// (Sharded: the masters, then their replicas), with Roles "primary",
// "replica" and "sentinel". Their clients dial the addresses the servers
// announce, so no proxy of this package is in front of them: their
// members have no Disconnect (the conformance URL harness puts its own
// proxies in front of every address a Locker dials).
//
// Server.URL carries a prefix unique to the Server. For a Redis cluster it
// names the primary with wait_replicas=1 (and wait_timeout=1s), so every
// grant is on the replica before it is handed out. The ZooKeeper servers use tickTime 200ms
// (ZooKeeperTick) and accept sessions of 400ms to 120s, as
// internal/zktest's do.
//
// # Images
//
// The Docker provider uses only the interface of the official images: the
// etcd binary's flags (/usr/local/bin/etcd, no entrypoint); redis-server's
// arguments, and sh for the Sentinel's config file (the host's network:
// Docker's NetworkMode "host"); the zookeeper image's
// ZOO_* variables (ZOO_MY_ID, ZOO_SERVERS, ZOO_TICK_TIME, ZOO_INIT_LIMIT,
// ZOO_SYNC_LIMIT, ZOO_4LW_COMMANDS_WHITELIST, ZOO_ADMINSERVER_ENABLED,
// ZOO_STANDALONE_ENABLED, ZOO_CFG_EXTRA) and JVMFLAGS; the postgres image's
// POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB, and postgres's -c
// settings as its command. A server is ready when
// it answers its protocol: etcd a linearizable read through each member,
// ZooKeeper srvr reporting leader, follower or standalone on each server,
// Redis PING (and, for a cluster, the replica's link up, WAIT 1 answered,
// the Sentinel naming the primary and knowing the replica; on the host's
// network, the server's own pidfile or Sentinel id, so that another
// server on the port does not pass for it; Sentinel: every Sentinel
// knowing the replica and reaching its quorum; Sharded: every node
// cluster_state:ok and every replica's link up), Postgres a
// connection and SELECT 1 (and, for a standby, the primary listing it as
// streaming). A PostgreSQL standby in Docker runs pg_basebackup and then
// postgres as its command (bash, setpriv); the primary gets a replication
// line in pg_hba.conf through docker exec. The wait is bounded by ReadyTimeout; its error
// carries the container's last log lines.
//
// # This package's own tests
//
// They never skip, and which machine they need is in their names: TestDocker*
// start their servers with the Docker provider whatever $FENCELOCK_PROVIDER
// says, so they fail where no Docker engine (or image) is; TestLocal* use
// the local provider and need Debian's packages (scripts/test installs
// them); the others need neither. Without Docker, run
// go test -run 'TestLocal|TestSelect' ./conformance/servers.
package servers
