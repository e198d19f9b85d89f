package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// Fault is a kind of fault the nemesis injects.
type Fault string

// The fault kinds (see the package doc).
const (
	Pause     Fault = "pause"
	Kill      Fault = "kill"
	Partition Fault = "partition"
	Latency   Fault = "latency"
	Member    Fault = "member"
	Failover  Fault = "failover"
	SlotMove  Fault = "slot-move"
)

// ClientFaults are the faults that need no control of the servers: the
// default, and all that run against a cluster of the user's.
var ClientFaults = []Fault{Pause, Kill, Partition, Latency}

// AllFaults are every fault kind.
var AllFaults = append(slices.Clone(ClientFaults), Member, Failover, SlotMove)

// Guard is the store whose fencing guard protects the counter.
type Guard string

// The guards.
const (
	// GuardFile is filefence over Config.Out/guard (the default): workers
	// on this machine share it.
	GuardFile Guard = "file"
	// GuardRedis is redisfence; GuardURL is a go-redis URL
	// (redis://host:port/db).
	GuardRedis Guard = "redis"
	// GuardEtcd is etcdfence; GuardURL is the endpoints, comma-separated
	// (http://host:port,…).
	GuardEtcd Guard = "etcd"
	// GuardSQL is sqlfence on PostgreSQL; GuardURL is a pgx DSN.
	GuardSQL Guard = "sql"
	// GuardNone writes the counter file with no fencing at all: it shows
	// what an unfenced lock loses, and a campaign with it is expected to
	// report violations.
	GuardNone Guard = "none"
)

// Guards are the guard names, in the order the CLI lists them.
var Guards = []Guard{GuardFile, GuardRedis, GuardEtcd, GuardSQL, GuardNone}

// RedisClient is how a worker builds its Redis client, for a redis:// URL.
type RedisClient string

// The Redis client configurations.
const (
	// RedisClientURL opens the URL with backend.Open (the default): the
	// adapter's own client settings.
	RedisClientURL RedisClient = "url"
	// RedisClientDocs is a go-redis client built as the redis package's
	// docs show: goredis.NewClient with the URL's address, credentials and
	// database, ContextTimeoutEnabled, and go-redis's defaults otherwise;
	// with Config.Sentinel, goredis.NewFailoverClient. The default with a
	// Sentinel, and the only client it takes.
	RedisClientDocs RedisClient = "docs"
	// RedisClientNoContextTimeout is RedisClientDocs with
	// ContextTimeoutEnabled off (go-redis's default): a call may outlive
	// its context, which the adapter must keep from delaying the loss
	// signal.
	RedisClientNoContextTimeout RedisClient = "no-context-timeout"
)

// Sentinel is a Redis primary's Sentinel. With it, workers follow the
// primary through the Sentinel (a go-redis failover client, built as the
// redis package's docs show) instead of dialling the URL's host, which
// then only carries the adapter's settings (prefix, wait_replicas, ...).
type Sentinel struct {
	// Master is the name the Sentinel monitors the primary under.
	Master string
	// Addr is where the Sentinel listens (host:port).
	Addr string
	// Hosts maps the addresses the Sentinel announces (host:port) to
	// those to dial, for servers behind published ports (containers).
	Hosts map[string]string
	// Failover makes the Sentinel fail the primary over and returns once
	// a new primary accepts writes (*servers.Server's Failover is one);
	// it is the Failover fault. Nil: no Failover fault.
	Failover func(ctx context.Context) error `json:"-"`
}

// ServerMember is a server process or container the nemesis may kill,
// restart, pause and continue (*servers.Member is one). Restart and
// Unpause return once the member answers again.
type ServerMember interface {
	Kill(ctx context.Context) error
	Restart(ctx context.Context) error
	Pause(ctx context.Context) error
	Unpause(ctx context.Context) error
	String() string
}

// Config is one campaign.
type Config struct {
	// URL is the lock service, a fencelock backend URL. Each host in it
	// (etcd://h1,h2,h3/…) is reached through a proxy per worker.
	URL string
	// Name is the lock name (default "chaos").
	Name string
	// Workers is how many worker processes contend (default 5).
	Workers int
	// TTL is the lease TTL (default 2s).
	TTL time.Duration
	// HoldMax bounds the random hold between the read and the write
	// (default 10ms).
	HoldMax time.Duration
	// Duration is how long the campaign runs at least (default 1m).
	Duration time.Duration
	// MinGrants and MinFaults make it run on past Duration until it has
	// granted that many leases and injected every fault kind that many
	// times (default 0: no minimum), up to MaxDuration.
	MinGrants, MinFaults int
	// MaxDuration ends the campaign even if a minimum is not met, which
	// is then a violation (default 3×Duration).
	MaxDuration time.Duration
	// Faults are the kinds to inject (default ClientFaults; Member needs
	// Members). An empty non-nil slice injects none.
	Faults []Fault
	// FaultGap is the quiet time between two faults (default TTL).
	FaultGap time.Duration
	// Members are the servers Member faults act on, in turn.
	Members []ServerMember
	// Guard protects the counter (default GuardFile); GuardURL says where
	// its store is, for the guards that need one.
	Guard    Guard
	GuardURL string
	// RedisClient is how workers build their Redis client (default
	// RedisClientURL); only for redis:// URLs.
	RedisClient RedisClient
	// Sentinel, for a redis:// URL, makes workers reach the primary
	// through it; its Failover is the Failover fault.
	Sentinel *Sentinel
	// Failover, if set, is the Failover fault for a URL that names a
	// deployment which fails over by itself (redis+sentinel,
	// redis+cluster, a PostgreSQL multi-host URL): it fails the primary
	// over and returns once a new one accepts writes (*servers.Server's
	// Failover is one).
	Failover func(ctx context.Context) error
	// SlotMove, if set, is the SlotMove fault, for a Redis Cluster
	// (redis+cluster): it moves the hash slot of the lock's keys to
	// another master (CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE,
	// SETSLOT NODE), stopping halfway for midway with the slot's keys
	// split between the two (the lock's scripts meet TRYAGAIN and ASK),
	// and returns once the move is done (*servers.Server's MoveSlot is
	// one).
	SlotMove func(ctx context.Context, midway time.Duration) error
	// Out is the directory the history and the reports are written to
	// (required; created if missing).
	Out string
	// Seed seeds the choice of faults, their targets and lengths, and the
	// holds (default: from the clock); a run's timing still varies.
	Seed int64
	// Log, if set, gets a line per fault and a progress line every few
	// seconds.
	Log io.Writer
	// Worker is the program the worker processes run: a binary whose main
	// calls WorkerMain first thing, as the fencelock command's does. Empty:
	// this process's own executable, re-executed.
	Worker string
}

// allowInProcess lets a campaign run over mem://, where each worker has a
// lock of its own: only the package's planted-bug test sets it, to show
// that the checker catches a lock that does not exclude.
var allowInProcess bool

// errConfig marks an invalid Config; it wraps backend.ErrInvalidOption.
var errConfig = fmt.Errorf("chaos: invalid campaign: %w", backend.ErrInvalidOption)

// withDefaults validates c and fills in its defaults, without dialling:
// the URL, the workers, the times, the faults, the guard and the Redis
// client, in that order.
func (c Config) withDefaults() (Config, error) {
	u, err := c.checkURL()
	if err != nil {
		return c, err
	}
	if c.Name == "" {
		c.Name = "chaos"
	}
	if err := backend.ValidateName(c.Name); err != nil {
		return c, err
	}
	for _, step := range []func(*url.URL) error{c.withWorkers, c.withTimes, c.checkFaults, c.withGuard, c.withRedisClient} {
		if err := step(u); err != nil {
			return c, err
		}
	}
	if c.Out == "" {
		return c, invalidf("no output directory")
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	return c, nil
}

// invalidf is an error of an invalid Config (errConfig).
func invalidf(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errConfig}, a...)...)
}

// checkURL checks the campaign's URL: one the workers can reach through
// their proxies.
func (c *Config) checkURL() (*url.URL, error) {
	if err := backend.CheckURL(c.URL); err != nil {
		return nil, err
	}
	u, _ := url.Parse(c.URL)
	if u.Scheme == "mem" {
		// Each worker process would get a mem:// of its own: they would
		// not exclude each other. The planted-bug test does this on
		// purpose (see allowInProcess).
		if !allowInProcess {
			return nil, invalidf("%s is in-process: each worker would have a lock of its own; use a server's URL", urlkit.Redact(u))
		}
	} else if u.Host == "" {
		return nil, invalidf("%s names no host:port the workers' proxies could forward to", urlkit.Redact(u))
	}
	switch u.Scheme {
	case "etcds", "zks":
		// The certificate would be checked against the proxy's
		// 127.0.0.1, not the server's name. (A Redis URL's workers dial
		// their proxies through a hook and check the server's name:
		// rediss works.)
		return nil, invalidf("%s:// is TLS, which the workers' proxies would break (the server's certificate is checked against its host name): run the campaign over the plain scheme", u.Scheme)
	case "postgres", "postgresql":
		if u.Query().Get("sslmode") == "verify-full" {
			return nil, invalidf("sslmode=verify-full checks the server's certificate against its host name, which the workers' proxies would break: run the campaign with sslmode require, verify-ca or disable")
		}
	}
	return u, nil
}

// withWorkers checks the counts and the worker binary, and defaults the
// number of workers to 5.
func (c *Config) withWorkers(*url.URL) error {
	if c.Workers < 0 || c.MinGrants < 0 || c.MinFaults < 0 {
		return invalidf("negative workers, minimum grants or minimum faults")
	}
	if c.Workers == 0 {
		c.Workers = 5
	}
	if c.Worker != "" {
		if st, err := os.Stat(c.Worker); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return invalidf("worker %q is not an executable file", c.Worker)
		}
		// As checked: a bare name is a file here, not one on $PATH.
		abs, err := filepath.Abs(c.Worker)
		if err != nil {
			return invalidf("worker %q: %v", c.Worker, err)
		}
		c.Worker = abs
	}
	if c.Workers < 2 {
		return invalidf("%d worker: a campaign needs two to contend", c.Workers)
	}
	return nil
}

// withTimes defaults the TTL (2s), hold (10ms), duration (1m), maximum
// duration (3x the duration) and fault gap (the TTL), and checks the TTL
// against the adapter's rules.
func (c *Config) withTimes(u *url.URL) error {
	def := func(d *time.Duration, v time.Duration, what string) error {
		if *d < 0 {
			return fmt.Errorf("%w: negative %s %v", errConfig, what, *d)
		}
		if *d == 0 {
			*d = v
		}
		return nil
	}
	for _, e := range []error{
		def(&c.TTL, 2*time.Second, "TTL"),
		def(&c.HoldMax, 10*time.Millisecond, "hold"),
		def(&c.Duration, time.Minute, "duration"),
	} {
		if e != nil {
			return e
		}
	}
	if err := def(&c.MaxDuration, 3*c.Duration, "maximum duration"); err != nil {
		return err
	}
	if err := def(&c.FaultGap, c.TTL, "fault gap"); err != nil {
		return err
	}
	// The adapter checks the TTL's shape (etcd: whole seconds; Redis:
	// milliseconds, at least its minimum) in the URL, before any dial.
	withTTL := *u
	q := withTTL.Query()
	q.Set("ttl", c.TTL.String())
	withTTL.RawQuery = q.Encode()
	if err := backend.CheckURL(withTTL.String()); err != nil {
		return fmt.Errorf("%w: TTL %v: %w", errConfig, c.TTL, err)
	}
	if c.MaxDuration < c.Duration {
		return invalidf("maximum duration %v is below the duration %v", c.MaxDuration, c.Duration)
	}
	return nil
}

// checkFaults defaults the faults to the client faults and checks that
// each is known, listed once, and has what it needs.
func (c *Config) checkFaults(u *url.URL) error {
	if c.Faults == nil {
		c.Faults = slices.Clone(ClientFaults)
	}
	seen := map[Fault]bool{}
	for _, f := range c.Faults {
		if !slices.Contains(AllFaults, f) {
			return invalidf("unknown fault %q (known: %s)", f, joinFaults(AllFaults))
		}
		if seen[f] {
			return invalidf("fault %q listed twice", f)
		}
		seen[f] = true
	}
	if seen[Member] && len(c.Members) == 0 {
		return invalidf("member faults need servers this campaign controls (Members); against a cluster of your own only %s run", joinFaults(ClientFaults))
	}
	if seen[Failover] && c.Failover == nil && (c.Sentinel == nil || c.Sentinel.Failover == nil) {
		return invalidf("failover faults need a way to fail over (Config.Failover, or Config.Sentinel with its Failover)")
	}
	if seen[SlotMove] && c.SlotMove == nil {
		return invalidf("slot-move faults need a way to move the lock's slot (Config.SlotMove)")
	}
	if c.Failover != nil && c.Sentinel != nil {
		return invalidf("Config.Failover and Config.Sentinel: the Sentinel's Failover is the failover fault")
	}
	if c.Sentinel != nil && (u.Scheme != "redis" || c.Sentinel.Master == "" || c.Sentinel.Addr == "") {
		return invalidf("a Sentinel is for redis:// URLs, and needs its master name and address")
	}
	if u.Scheme == "mem" && (seen[Partition] || seen[Latency]) {
		return invalidf("mem:// has no network link to partition or slow")
	}
	return nil
}

// withGuard defaults the guard to the file guard and checks its URL.
func (c *Config) withGuard(*url.URL) error {
	if c.Guard == "" {
		c.Guard = GuardFile
	}
	switch c.Guard {
	case GuardFile, GuardNone:
		if c.GuardURL != "" {
			return invalidf("guard %s takes no URL (it lives in %s)", c.Guard, "the output directory")
		}
	case GuardRedis, GuardEtcd, GuardSQL:
		if c.GuardURL == "" {
			return invalidf("guard %s needs a URL of its store", c.Guard)
		}
		if err := checkGuardURL(c.Guard, c.GuardURL); err != nil {
			return invalidf("guard %s: %s", c.Guard, scrubPasswords(err.Error(), c.GuardURL))
		}
	default:
		return invalidf("unknown guard %q (known: %s)", c.Guard, joinGuards())
	}
	return nil
}

// withRedisClient defaults the Redis client (the URL's; with a Sentinel,
// the docs' failover client) and checks it fits the URL.
func (c *Config) withRedisClient(u *url.URL) error {
	switch c.RedisClient {
	case "":
		c.RedisClient = RedisClientURL
		if c.Sentinel != nil {
			c.RedisClient = RedisClientDocs
		}
	case RedisClientURL:
		if c.Sentinel != nil {
			return invalidf("Redis client %q and a Sentinel: the Sentinel's client is the docs' failover client", c.RedisClient)
		}
	case RedisClientDocs, RedisClientNoContextTimeout:
		if c.Sentinel != nil && c.RedisClient != RedisClientDocs {
			return invalidf("Redis client %q and a Sentinel: the Sentinel's client is the docs' failover client", c.RedisClient)
		}
		if u.Scheme != "redis" {
			return invalidf("Redis client %q is for redis:// URLs, not %s://", c.RedisClient, u.Scheme)
		}
	default:
		return invalidf("unknown Redis client %q (known: url, docs, no-context-timeout)", c.RedisClient)
	}
	return nil
}

func joinFaults(fs []Fault) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ",")
}

func joinGuards() string {
	s := make([]string, len(Guards))
	for i, g := range Guards {
		s[i] = string(g)
	}
	return strings.Join(s, ",")
}

// ParseFaults parses a comma-separated list of fault kinds ("all" is
// AllFaults, "none" or "" is none).
func ParseFaults(s string) ([]Fault, error) {
	switch s {
	case "all":
		return slices.Clone(AllFaults), nil
	case "", "none":
		return []Fault{}, nil
	}
	var fs []Fault
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(AllFaults, Fault(f)) {
			return nil, fmt.Errorf("%w: unknown fault %q (known: %s)", errConfig, f, joinFaults(AllFaults))
		}
		fs = append(fs, Fault(f))
	}
	return fs, nil
}

// ErrViolation is returned (wrapped) by Run when the campaign ran but the
// checker found a violation.
var ErrViolation = errors.New("chaos: safety violation")

// scrubPasswords replaces in msg the passwords of the URLs in raw (one, or
// a comma-separated list, as --guard-url takes) by xxxxx: a store client's
// parse error may quote an endpoint whole.
func scrubPasswords(msg, raw string) string {
	for _, e := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(e))
		if err != nil || u.User == nil {
			continue
		}
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, url.UserPassword("", pw).String()[1:], "xxxxx") // as written, %-escaped
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return msg
}
