package servers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/urlkit"
)

// Kind is the server software a Server runs.
type Kind string

// The kinds of server.
const (
	Etcd      Kind = "etcd"
	ZooKeeper Kind = "zookeeper"
	Redis     Kind = "redis"
	Postgres  Kind = "postgres"
)

// Kinds are the lock backends' kinds, in the order the suite runs them. A
// Postgres Server also serves the SQL fencing guards.
var Kinds = []Kind{Etcd, ZooKeeper, Redis, Postgres}

// Topology is the shape of a Server.
type Topology string

// The topologies.
const (
	// Single is one server.
	Single Topology = "single"
	// Cluster is a 3-member etcd cluster, a 3-server ZooKeeper ensemble, a
	// Redis primary with one replica and one Sentinel, or a PostgreSQL
	// primary with an asynchronous streaming standby (Docker and local),
	// named together in a multi-host URL with
	// target_session_attrs=read-write.
	Cluster Topology = "cluster"
	// SyncStandby is a PostgreSQL primary with a synchronous streaming
	// standby (synchronous_standby_names names it; synchronous_commit on:
	// every commit waits until the standby has flushed it), named as
	// Cluster's pair is.
	SyncStandby Topology = "sync"
	// Sentinel is a Redis primary, its replica and three Sentinels, named
	// by a redis+sentinel URL over the Sentinels (Docker and local).
	Sentinel Topology = "sentinel"
	// Sharded is a Redis Cluster of three masters with a replica each,
	// named by a redis+cluster URL over every node (Docker and local);
	// Server.MoveSlot migrates a slot (local).
	Sharded Topology = "sharded"
)

// Topologies are the topologies each kind has besides Single.
var Topologies = map[Kind][]Topology{
	Etcd: {Cluster}, ZooKeeper: {Cluster}, Redis: {Cluster, Sentinel, Sharded}, Postgres: {Cluster, SyncStandby},
}

// Provider is where a Server comes from.
type Provider string

// The providers.
const (
	// External is a server of your own, given by an environment variable:
	// FENCELOCK_ETCD_URL, FENCELOCK_ZK_URL, FENCELOCK_REDIS_URL (fencelock
	// URLs) or FENCELOCK_POSTGRES_URL (a DSN).
	External Provider = "external"
	// Docker runs containers (see Image) on a private Docker network,
	// or for Redis's Sentinel and Sharded topologies on the host's
	// network, announcing 127.0.0.1 addresses.
	Docker Provider = "docker"
	// Local runs processes on this machine: embedded etcd, and Debian's
	// zookeeper, redis-server and postgresql: single servers, a
	// PostgreSQL primary with its standby (Cluster, SyncStandby), and
	// Redis's Sentinel and Sharded topologies.
	Local Provider = "local"
	// Auto picks External if the kind's variable is set, else Docker if the
	// engine answers and has (or can pull) the image, else Local.
	Auto Provider = "auto"
)

// ProviderEnv is the environment variable Start and ProvidersFromEnv read:
// a provider name or a comma-separated list of them.
const ProviderEnv = "FENCELOCK_PROVIDER"

// URLEnv maps each kind to the environment variable that names an external
// server of that kind.
var URLEnv = map[Kind]string{
	Etcd:      "FENCELOCK_ETCD_URL",
	ZooKeeper: "FENCELOCK_ZK_URL",
	Redis:     "FENCELOCK_REDIS_URL",
	Postgres:  "FENCELOCK_POSTGRES_URL",
}

// Server is a running server of one kind and topology, stopped and removed
// when the test that started it ends.
type Server struct {
	Provider Provider // where it comes from: External, Docker or Local
	Kind     Kind     // etcd, ZooKeeper, Redis or PostgreSQL
	Topology Topology // one server, or a cluster
	// URL is a fencelock backend URL with a prefix unique to this Server
	// (etcd://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/fencelock-…,
	// zk://…/fencelock-…?dial_timeout=30s,
	// redis://127.0.0.1:p/0?prefix=fencelock-…; for a Redis cluster the
	// primary's address with wait_replicas=1) or, for Postgres, a
	// postgres:// DSN (postgres://user[:password]@127.0.0.1:p/db?sslmode=disable)
	// without a prefix: every Postgres Server is a server of its own. An
	// External server's URL is the variable's value as given.
	URL string
	// Members are the server's processes or containers, in order (etcd and
	// ZooKeeper: member 1 to 3; Redis: primary, replica, then the
	// Sentinels; Sharded: the three masters, then their replicas in the
	// same order; PostgreSQL: the first primary, then the first standby).
	// Empty for External.
	Members []*Member

	sentinel *Member // Redis cluster via Docker
	// primary and failover are Primary and Failover of the local Redis
	// Sentinel and Sharded topologies and of the PostgreSQL pairs.
	primary, failover func(context.Context) (*Member, error)
	// moveSlot is MoveSlot of the local Sharded topology.
	moveSlot func(ctx context.Context, midway time.Duration) error
	// replication cuts or heals a local PostgreSQL standby's replication
	// (CutReplication).
	replication func(cut bool) error
}

// Member is one server process or container of a Server, with hooks that
// inject faults. A hook the provider cannot do returns an error that
// matches errors.ErrUnsupported. Hooks that bring a member back (Unpause,
// Restart, Reconnect) wait until it answers its protocol again (at most
// ReadyTimeout).
type Member struct {
	// Name is the container name (Docker) or the kind (Local).
	Name string
	// Addr is where the member's client port is published: 127.0.0.1:port.
	// It stays the same over Stop/Kill and Restart.
	Addr string
	// Role is "primary", "replica" or "sentinel" for Redis (as started; a
	// failover changes it, see Server.Primary); for a PostgreSQL primary
	// and standby, "primary" or "standby" as they are now (Failover
	// swaps them; "failed" while an old primary is being rebuilt as a
	// standby); else "".
	Role string

	h hooks
}

// hooks are what a provider can do to a member; a nil method value means
// unsupported.
type hooks struct {
	stop, kill, pause, unpause, restart, disconnect, reconnect func(context.Context) error
}

func (m *Member) do(ctx context.Context, name string, f func(context.Context) error) error {
	if f == nil {
		return fmt.Errorf("servers: %s of %s: %w", name, m.Name, errors.ErrUnsupported)
	}
	if err := f(ctx); err != nil {
		return fmt.Errorf("servers: %s of %s: %w", name, m.Name, err)
	}
	return nil
}

// String returns the member's name.
func (m *Member) String() string { return m.Name }

// Stop stops the member cleanly (its stop signal: SIGTERM, or SIGINT for
// Postgres; SIGKILL after 10s). Its data stays: Restart starts it again.
func (m *Member) Stop(ctx context.Context) error { return m.do(ctx, "stop", m.h.stop) }

// Kill stops the member with SIGKILL, as a crash. Its data stays: Restart
// starts it again.
func (m *Member) Kill(ctx context.Context) error { return m.do(ctx, "kill", m.h.kill) }

// Pause freezes the member (the cgroup freezer, or SIGSTOP): connections
// stay open, nothing is answered.
func (m *Member) Pause(ctx context.Context) error { return m.do(ctx, "pause", m.h.pause) }

// Unpause continues a paused member and waits until it answers.
func (m *Member) Unpause(ctx context.Context) error { return m.do(ctx, "unpause", m.h.unpause) }

// Restart starts the member again after Stop or Kill (a running member is
// stopped first), with the same data on the same published port, and waits
// until it answers (an etcd member: serves a linearizable read; a ZooKeeper
// server: is leader or follower again).
func (m *Member) Restart(ctx context.Context) error { return m.do(ctx, "restart", m.h.restart) }

// Disconnect cuts the member off the cluster's network: the other members
// and the clients (its published port included) can no longer reach it,
// and it keeps running. (Local: the proxy in front of the server stops
// forwarding and closes nothing, so the clients' requests hang, as in a
// network partition.)
func (m *Member) Disconnect(ctx context.Context) error {
	return m.do(ctx, "disconnect", m.h.disconnect)
}

// Reconnect undoes Disconnect and waits until the member answers.
func (m *Member) Reconnect(ctx context.Context) error { return m.do(ctx, "reconnect", m.h.reconnect) }

// Start starts a server of kind and topology from the provider named by
// $FENCELOCK_PROVIDER (its first entry if it is a list; default Auto) and
// removes it when t ends. It never skips: if the provider cannot start the
// server, it fails t with the reason.
func Start(t testing.TB, kind Kind, topo Topology) *Server {
	t.Helper()
	ps, err := ProvidersFromEnv()
	if err != nil {
		t.Fatalf("servers: %v", err)
	}
	return StartWith(t, ps[0], kind, topo)
}

// StartWith is Start with the provider given.
func StartWith(t testing.TB, p Provider, kind Kind, topo Topology) *Server {
	t.Helper()
	if err := check(kind, topo); err != nil {
		t.Fatalf("servers: %v", err)
	}
	chosen, why, err := resolve(p, kind, topo)
	if err != nil {
		t.Fatalf("servers: %s %s: %v", kind, topo, err)
	}
	var s *Server
	switch chosen {
	case External:
		s = &Server{URL: os.Getenv(URLEnv[kind])}
	case Docker:
		s, err = startDocker(t, kind, topo)
	case Local:
		s, err = startLocal(t, kind, topo)
	}
	if err != nil {
		t.Fatalf("servers: %s %s via %s: %v", kind, topo, chosen, err)
	}
	s.Provider, s.Kind, s.Topology = chosen, kind, topo
	t.Logf("servers: %s %s via %s (%s): %s", kind, topo, chosen, why, redact(s.URL))
	return s
}

// Resolve returns the provider that StartWith(t, p, kind, topo) would use:
// p itself, or for Auto the first that works. It starts nothing (Docker:
// it asks the engine, and pulls the image if it is absent). The error says
// why no provider fits.
func Resolve(p Provider, kind Kind, topo Topology) (Provider, error) {
	if err := check(kind, topo); err != nil {
		return "", err
	}
	chosen, _, err := resolve(p, kind, topo)
	return chosen, err
}

// ProvidersFromEnv returns the providers listed in $FENCELOCK_PROVIDER
// (comma-separated; default Auto), or an error naming an unknown one.
func ProvidersFromEnv() ([]Provider, error) {
	v := strings.TrimSpace(os.Getenv(ProviderEnv))
	if v == "" {
		return []Provider{Auto}, nil
	}
	var ps []Provider
	for _, f := range strings.Split(v, ",") {
		p := Provider(strings.TrimSpace(f))
		if err := checkProvider(p); err != nil {
			return nil, fmt.Errorf("$%s=%q: %w", ProviderEnv, v, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func checkProvider(p Provider) error {
	switch p {
	case External, Docker, Local, Auto:
		return nil
	}
	return fmt.Errorf("unknown provider %q (want external, docker, local or auto)", p)
}

func check(kind Kind, topo Topology) error {
	if _, ok := URLEnv[kind]; !ok {
		return fmt.Errorf("unknown kind %q (want etcd, zookeeper, redis or postgres)", kind)
	}
	switch topo {
	case Single, Cluster:
	case Sentinel, Sharded:
		if kind != Redis {
			return fmt.Errorf("topology %s is a Redis topology, not one of %s", topo, kind)
		}
	case SyncStandby:
		if kind != Postgres {
			return fmt.Errorf("topology %s is a PostgreSQL topology, not one of %s", topo, kind)
		}
	default:
		return fmt.Errorf("unknown topology %q (want single, cluster, sentinel, sharded or sync)", topo)
	}
	return nil
}

// resolve picks the provider and says why.
func resolve(p Provider, kind Kind, topo Topology) (Provider, string, error) {
	if err := checkProvider(p); err != nil {
		return "", "", err
	}
	switch p {
	case External:
		if os.Getenv(URLEnv[kind]) == "" {
			return "", "", fmt.Errorf("provider external: $%s is not set", URLEnv[kind])
		}
		return External, "$" + URLEnv[kind], nil
	case Docker:
		return Docker, "image " + Image(kind), nil
	case Local:
		if topo == Sentinel || topo == Sharded {
			return Local, "processes on this machine", nil
		}
		if topo != Single && kind != Postgres {
			return "", "", errors.New("provider local runs single servers only (and a PostgreSQL primary with its standby): a cluster needs docker (FENCELOCK_PROVIDER=docker) or your own (external)")
		}
		return Local, "processes on this machine", nil
	}
	// Auto.
	if os.Getenv(URLEnv[kind]) != "" {
		return External, "auto: $" + URLEnv[kind] + " is set", nil
	}
	derr := dockerUsable(kind)
	if derr == nil {
		return Docker, "auto: image " + Image(kind), nil
	}
	if topo == Sentinel || topo == Sharded {
		return Local, fmt.Sprintf("auto: $%s unset, docker unusable: %v", URLEnv[kind], derr), nil
	}
	if topo != Single && kind != Postgres {
		return "", "", fmt.Errorf("provider auto: no external server ($%s unset), docker unusable (%v), and local runs single servers only", URLEnv[kind], derr)
	}
	return Local, fmt.Sprintf("auto: $%s unset, docker unusable: %v", URLEnv[kind], derr), nil
}

// redact hides the password of a URL or DSN for logs.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		if strings.Contains(u, "password") {
			return "(a DSN with a password)"
		}
		return u
	}
	return urlkit.Redact(p)
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// prefix is a lock prefix unique to one Server.
func prefix() string { return "fencelock-servers-" + randomHex(4) }

// zkQuery ends the URL of every ZooKeeper server this package starts: a
// JVM server on a loaded two-core machine took longer than the 10s default
// dial_timeout to grant a new session (a three-node Docker ensemble beside
// a second test run).
const zkQuery = "?dial_timeout=30s"
