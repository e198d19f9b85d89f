package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
)

// DefaultPrefix starts the adapter's table, sequence, function and channel
// names when Config.Prefix is empty: fencelock_locks, fencelock_waiters, ...
const DefaultPrefix = "fencelock"

// MinTTL is the shortest TTL the adapter accepts: expiries are counted in
// whole milliseconds, and below 100ms the renewal period (TTL/3) and the
// drift margin leave too little room for a round trip on a busy host.
const MinTTL = 100 * time.Millisecond

// ttlLimits are the adapter's TTL limits, from which its Capabilities, its
// URLs' Limits, its suite profile and its CheckTTL derive: at least
// MinTTL, in whole milliseconds.
var ttlLimits = driver.TTLLimits{Min: MinTTL, Granularity: time.Millisecond, Counted: "postgres expiries"}

// Client is what the adapter needs of a pgx client, with pgx's signatures.
// *pgxpool.Pool satisfies it, and is what to use: a Locker sends renewals
// from timers while other acquisitions run, so the client must be safe for
// concurrent use and run each statement in a transaction of its own. A
// single session is neither: New refuses a *pgx.Conn, a *pgxpool.Conn and
// a pgx.Tx. Another Client (a wrapper of a pool) must be both.
type Client interface {
	// Exec runs a statement that returns no rows, as pgx's. The adapter
	// passes a pgx.QueryExecMode as the first of args: a wrapper passes
	// args to pgx as they are.
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	// Query runs a query that returns rows, as pgx's (args as for Exec).
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	// QueryRow runs a query that returns at most one row, as pgx's (args
	// as for Exec).
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config holds the adapter's own settings; the zero Config is the default.
type Config struct {
	// Prefix starts every table, sequence, function and notification
	// channel name of the adapter (default DefaultPrefix): a lower-case
	// SQL identifier of at most 40 bytes. Lockers that share a prefix (and
	// a database) share their locks.
	Prefix string
	// NoMigrate: the Locker does not create or update its tables and
	// functions on first use; run Migrate or the SQL of Schema before.
	// Without it, the first use reads the schema's version (one round
	// trip) and migrates only if it is not current.
	NoMigrate bool
	// Listen is how the Locker's listener connection (LISTEN, for the
	// notifications that wake waiters) is opened. nil: with the client's
	// own configuration, and its BeforeConnect hook, if the client is a
	// *pgxpool.Pool, else no listener. Point it at the server itself
	// when the client goes through a transaction-mode pooler (PgBouncer),
	// where LISTEN does not work; URL parameter listen_host.
	Listen *pgx.ConnConfig
	// NoListen turns the listener off: waiters then learn that they were
	// granted the lock from their renewals (every TTL/3) and a timer set
	// to the holder's remaining TTL, not at once.
	NoListen bool
}

func (c Config) check() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	return c, checkPrefix(c.Prefix)
}

// New returns a Locker that keeps its locks in PostgreSQL through client
// (a *pgxpool.Pool), with the adapter's settings cfg (the zero Config is
// the default of every field). opts are the Locker's defaults (see
// backend.Option). Closing the Locker does not close client.
func New(client Client, cfg Config, opts ...backend.Option) (*backend.Locker, error) {
	d, err := newDriver(client, cfg, nil)
	if err != nil {
		return nil, err
	}
	return backend.New(d, opts...)
}

// statements are the adapter's SQL for one prefix. Each is sent with
// pgx.QueryExecModeExec: one round trip, an unnamed statement, no session
// state, so a transaction-mode pooler can run it on any server connection.
//
// acquireValue is acquire for an election candidate (driver.Request.Value):
// the same function, its metadata argument the value made a jsonb string
// by the server (to_jsonb), and its holder NULL. proclaim replaces a
// holder's value with one UPDATE of its lock row, only while the row is
// still this acquisition's grant (owner and token) and live.
type statements struct {
	acquire, acquireValue, renew, release, revoke, inspect, proclaim string
}

func statementsFor(p string) statements {
	return statements{
		acquire:      "SELECT r_status, r_token, r_wait_ms FROM " + p + "_acquire_v1($1, $2, $3, $4, $5, $6)",
		acquireValue: "SELECT r_status, r_token, r_wait_ms FROM " + p + "_acquire_v1($1, $2, $3, $4, $5, to_jsonb($6::text)::text)",
		renew:        "SELECT r_status, r_token FROM " + p + "_renew_v1($1, $2, $3)",
		release:      "SELECT " + p + "_release_v1($1, $2)",
		revoke:       "SELECT " + p + "_revoke_v1($1, $2, $3)",
		inspect:      "SELECT r_held, r_owner, r_token, r_ttl_ms, r_holder, r_metadata FROM " + p + "_inspect_v1($1)",
		proclaim: "UPDATE " + p + "_locks SET metadata = to_jsonb($4::text) " +
			"WHERE name = $1 AND owner = $2 AND token = $3 AND expires > clock_timestamp()",
	}
}

// pgDriver implements driver.Driver over one pgx client.
type pgDriver struct {
	c     Client
	owned *pgxpool.Pool // closed by Shutdown when the driver opened it
	cfg   Config
	id    string // this driver's random id: the first part of every owner id
	sql   statements
	seq   atomic.Uint64
	hub   *hub // nil without a listener

	// migrating holds a token while a call migrates: the others wait for
	// it or for their ctx, whichever ends first.
	migrating chan struct{}
	migrated  atomic.Bool

	// Counters for tests and benchmarks.
	attempts atomic.Int64 // acquire statements
	wakeups  atomic.Int64 // grant notifications delivered to waiting acquisitions

	mu     sync.Mutex
	closed bool
}

func newDriver(client Client, cfg Config, owned *pgxpool.Pool) (*pgDriver, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: postgres: nil client", backend.ErrInvalidOption)
	}
	switch client.(type) {
	case *pgx.Conn, *pgxpool.Conn, pgx.Tx:
		return nil, fmt.Errorf("%w: postgres: a %T is one session, not safe for concurrent use (a transaction would also keep every lock change to itself until it commits), and a Locker renews leases while others acquire: use a *pgxpool.Pool", backend.ErrInvalidOption, client)
	}
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	d := &pgDriver{c: client, owned: owned, cfg: cfg, id: hex.EncodeToString(b[:]), sql: statementsFor(cfg.Prefix),
		migrating: make(chan struct{}, 1)}
	if listen, before := listenConfig(client, cfg); listen != nil {
		d.hub = newHub(listen, before, channel(cfg.Prefix, d.id), &d.wakeups)
	}
	d.migrated.Store(cfg.NoMigrate)
	return d, nil
}

// listenConfig returns the listener's connection configuration, or nil for
// none, and the hook to call on a copy of it before each connection: a
// pool's BeforeConnect (credentials that rotate) when the configuration is
// the pool's. The listener's connection is closed by cancelling its wait
// for notifications, which no cancel request can end: it closes its socket
// at once (pgx's default), whatever the pool does for its statements.
func listenConfig(client Client, cfg Config) (*pgx.ConnConfig, func(context.Context, *pgx.ConnConfig) error) {
	var (
		lc     *pgx.ConnConfig
		before func(context.Context, *pgx.ConnConfig) error
	)
	switch p, ok := client.(*pgxpool.Pool); {
	case cfg.NoListen:
		return nil, nil
	case cfg.Listen != nil:
		lc = cfg.Listen.Copy()
	case ok:
		pc := p.Config()
		lc, before = pc.ConnConfig, pc.BeforeConnect
	default:
		return nil, nil
	}
	lc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	return lc, before
}

// channel is the notification channel of the driver with id: releases
// notify there when they grant the lock to one of its acquisitions (the
// functions derive it from the owner id, "<driver id>.<n>").
func channel(prefix, id string) string { return prefix + ":" + id }

// ready migrates the schema on the driver's first use, unless NoMigrate; a
// failed migration is tried again at the next use. One call migrates at a
// time; the others wait for it only as long as their ctx lets them (a
// migration can wait long for another process's, on its advisory lock).
func (d *pgDriver) ready(ctx context.Context) error {
	if d.migrated.Load() {
		return nil
	}
	select {
	case d.migrating <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: postgres: waiting for the schema migration another call runs: %w", backend.ErrUnavailable, ctx.Err())
	}
	defer func() { <-d.migrating }()
	if d.migrated.Load() {
		return nil
	}
	if err := Migrate(ctx, d.c, d.cfg.Prefix); err != nil {
		return err
	}
	d.migrated.Store(true)
	return nil
}

// Capabilities implements driver.Driver.
func (d *pgDriver) Capabilities() driver.Capabilities {
	return ttlLimits.Capabilities(driver.Capabilities{Name: "postgres", LockDelay: true})
}

// CheckTTL implements driver.Driver: ttlLimits' check (expiries are whole
// milliseconds).
func (d *pgDriver) CheckTTL(ttl time.Duration) error { return ttlLimits.Check(ttl) }

// NewLease implements driver.Driver. It sends nothing but the migration on
// the driver's first use: the lease's clock starts now, since the queue row
// a waiter's first statement writes expires one TTL after it arrives, so a
// waiter renews from the start. A candidate's value (req.Value) goes in the
// metadata column as a jsonb string, its holder NULL: a lock stores a JSON
// object or NULL there, so a string is always a value.
func (d *pgDriver) NewLease(ctx context.Context, req driver.Request) (driver.Lease, time.Time, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, time.Time{}, fmt.Errorf("postgres: %w", backend.ErrClosed)
	}
	if err := d.ready(ctx); err != nil {
		return nil, time.Time{}, err
	}
	var meta any // NULL without metadata
	if len(req.Metadata) > 0 {
		b, err := json.Marshal(req.Metadata)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("%w: postgres: metadata: %w", backend.ErrInvalidOption, err)
		}
		meta = string(b)
	}
	owner := d.id + "." + strconv.FormatUint(d.seq.Add(1), 36)
	if req.LockDelay > 0 {
		// The lock-delay in whole ms, rounded up: the functions read it
		// from the owner id (p_delay_v1).
		owner += "." + strconv.FormatInt((req.LockDelay+time.Millisecond-1).Milliseconds(), 10)
	}
	l := &lease{d: d, name: req.Name, owner: owner, ttl: req.TTL, ttlMs: req.TTL.Milliseconds(), acquireSQL: d.sql.acquire,
		holder: req.Holder, meta: meta, lost: req.Lost, notify: make(chan struct{}, 1), delay: req.LockDelay > 0}
	if req.Value != nil {
		l.acquireSQL, l.holder, l.meta = d.sql.acquireValue, nil, *req.Value
	}
	return l, time.Now(), nil
}

// Shutdown implements driver.Driver: it stops the listener and closes the
// pool if the driver opened it. It asks the server for nothing, and
// returns once the pool is closed or ctx ends, whichever comes first: pgx
// closes a pool's connections with a cancel request for a statement in
// flight, which waits up to 15s on a server that cannot be reached; the
// pool then goes on closing in the background.
func (d *pgDriver) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	if d.hub != nil {
		d.hub.close()
	}
	if d.owned != nil {
		closed := make(chan struct{})
		go func() {
			d.owned.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-ctx.Done():
			return fmt.Errorf("postgres: close the pool: %w", ctx.Err())
		}
	}
	return nil
}
