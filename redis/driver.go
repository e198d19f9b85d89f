package redis

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
)

// DefaultPrefix is the key prefix when Config.Prefix is empty.
const DefaultPrefix = "fencelock"

// MinTTL is the shortest TTL the adapter accepts. Redis counts PX expiries in
// whole milliseconds; below 100ms the renewal period (TTL/3) and the drift
// margin leave too little room for a round trip on a busy host.
const MinTTL = 100 * time.Millisecond

// ttlLimits are the adapter's TTL limits, from which its Capabilities, its
// URLs' Limits, its suite profile and its CheckTTL derive: at least
// MinTTL, in whole milliseconds.
var ttlLimits = driver.TTLLimits{Min: MinTTL, Granularity: time.Millisecond, Counted: "redis expiries"}

// DefaultWaitTimeout is how long an acquisition waits for replicas when
// Config.WaitReplicas is set and Config.WaitTimeout is not.
const DefaultWaitTimeout = 500 * time.Millisecond

// DefaultForeignInterval and DefaultForeignGap are Config.ForeignInterval
// and Config.ForeignGap when left zero: a foreign client that waits gets
// the key within about a second (the interval, the holder's hold, and its
// first retry in the gap, which is longer than redsync's longest default
// retry delay, 50-250ms at random, so that it tries at least once while
// the key is free; within a minute of a foreign sighting the gap lasts
// three times as long, 900ms, so that foreign clients waiting at once are
// all served).
const (
	DefaultForeignInterval = 700 * time.Millisecond
	DefaultForeignGap      = 300 * time.Millisecond
)

// ErrNotReplicated is returned (wrapped, together with
// backend.ErrUnavailable) by an acquisition that got the lock but whose grant
// was not acknowledged by Config.WaitReplicas replicas within its WAIT's
// bound (Config.WaitTimeout, at most half the TTL and three quarters of
// what was left of the context). The lock was released again (or expires with its TTL
// if that failed too); its token is never handed out. It is not
// backend.ErrNotAcquired: nobody else holds the lock, the backend cannot
// give the durability asked for (a replica down or resyncing), and a job
// that skips its work when the lock is held must not skip it silently then.
var ErrNotReplicated = errors.New("redis: grant not acknowledged by enough replicas")

// Client is what the adapter needs of a go-redis client: running scripts and
// subscribing. *redis.Client (also as returned by redis.NewFailoverClient
// for Sentinel), *redis.ClusterClient and *redis.Ring satisfy it.
type Client interface {
	// Scripter runs the adapter's Lua scripts: EVALSHA, and EVAL after a
	// NOSCRIPT.
	goredis.Scripter
	// Subscribe opens a pub/sub connection, as go-redis's: the adapter's
	// waiters learn of releases there.
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
}

// Config holds the adapter's own settings; the zero Config is the default.
// Lockers that share a prefix must share NoClockFloor and WaitReplicas too:
// a release grants the lock to the next waiter, whichever Locker it belongs
// to, with the releaser's settings (see the package documentation).
type Config struct {
	// Prefix starts every key and channel name (default DefaultPrefix). It
	// must not contain '{' or '}', which would move the Cluster hash tag.
	Prefix string
	// NoClockFloor turns the clock floor off: tokens are then the plain
	// counter, 1, 2, 3, and go back (repeat or restart at 1) when the
	// counter is lost or rolled back: the counter key deleted, a restart
	// without persistence, a failover that lost the latest INCRs. A stale
	// holder's writes are then admitted by a fencing check while the new
	// holder's are rejected. Set it only where small tokens matter more
	// and the counter cannot be lost (persistence with appendfsync always,
	// no failover, no deletion); URL parameter clock_floor=false.
	//
	// By default (false) every token is at least the server's clock in
	// microseconds (Unix time), the counter raised to it, so tokens keep
	// growing over such losses, provided the clock of the server that
	// grants the next token is not behind the clock of the server that
	// granted the last one by more than the time between the two grants.
	// Tokens are then large numbers (about 1.8e15), and each grant runs
	// one TIME more. See the package documentation, "Failover and lost
	// counters".
	NoClockFloor bool
	// WaitReplicas, when positive, makes every grant wait (WAIT) until that
	// many replicas acknowledged it, for up to WaitTimeout; otherwise the
	// lock is released and the acquisition fails with ErrNotReplicated
	// (and backend.ErrUnavailable): Acquire too, without waiting for the
	// replicas to come back. See the package documentation, "Replicas and
	// failover", for what it costs while replicas are away.
	WaitReplicas int
	// WaitTimeout bounds the WAIT (default DefaultWaitTimeout); each
	// acquisition's WAIT waits at most half its TTL and three quarters of
	// what is left of its context too. It must be positive: WAIT with 0
	// would block forever.
	WaitTimeout time.Duration
	// ForeignInterval keeps a mixed fleet fair to the other side: once a
	// holder that is not fencelock's (redsync, bsm/redislock: clients
	// that never queue and retry SET NX) was seen on a lock within the
	// last 10 minutes, a release hands the lock straight to the next
	// waiter of ours only while the key has gone from waiter to waiter of
	// ours for less than ForeignInterval (default DefaultForeignInterval)
	// since it was last free; the first release after that leaves the key
	// free for ForeignGap instead, during which no acquisition of ours
	// takes it, so that a foreign client's retry finds it free. Within a
	// minute of the last sighting a gap lasts three times ForeignGap, so
	// that a foreign client whose retries fail while another one holds the
	// key gets it in the same gap. A foreign client thus waits at most
	// about ForeignInterval, one hold of ours and a gap (measured with the
	// defaults, two redsync or redislock clients beside two of ours: at
	// most 0.66-1.55s, 0.85s in the median case). Our waiters keep their
	// order, and tokens keep growing. On a lock where no foreign holder was seen nothing changes
	// (a handoff reads one key more). Negative turns the gaps off: a
	// release always hands the lock to our next waiter, and foreign
	// clients get the key only when our queue is empty. It must be whole
	// milliseconds. URL parameter foreign_interval (off: no gaps). See the
	// package documentation, "Interoperability".
	ForeignInterval time.Duration
	// ForeignGap is how long a gap leaves the key free (default
	// DefaultForeignGap; three times that within a minute of a foreign
	// sighting): make it longer than the longest retry interval of the
	// foreign clients, and each gap gives one of them the key if any
	// waits; if none does, our next waiter waits out the gap. Whole
	// milliseconds, at least 1ms. URL parameter foreign_gap.
	ForeignGap time.Duration
	// MixedFleet leaves the gaps on every lock from the start, as if a
	// foreign holder had been seen on it. Set it during a migration
	// whose fencelock clients may keep the queue busy from before a
	// foreign client holds the key: a foreign client that never gets the
	// key is never seen, and would wait until our queue empties. It costs
	// a fencelock-only fleet a gap every ForeignInterval of handoffs
	// (three times ForeignGap long in the first minute of every ten, as
	// after a sighting: the mark it sets lapses after ten minutes).
	// Default false; URL parameter mixed_fleet=true. Without effect when
	// ForeignInterval is negative.
	MixedFleet bool
}

func (c Config) check() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		return c, fmt.Errorf("%w: redis: prefix %q must not contain '{' or '}'", backend.ErrInvalidOption, c.Prefix)
	}
	if c.WaitReplicas < 0 {
		return c, fmt.Errorf("%w: redis: WaitReplicas must not be negative, got %d", backend.ErrInvalidOption, c.WaitReplicas)
	}
	if c.WaitTimeout < 0 || c.WaitTimeout > 0 && c.WaitTimeout < time.Millisecond {
		return c, fmt.Errorf("%w: redis: WaitTimeout must be at least 1ms, got %v", backend.ErrInvalidOption, c.WaitTimeout)
	}
	if c.WaitReplicas > 0 && c.WaitTimeout == 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.ForeignInterval > 0 && c.ForeignInterval%time.Millisecond != 0 {
		return c, fmt.Errorf("%w: redis: ForeignInterval must be whole milliseconds (or negative: no gaps), got %v", backend.ErrInvalidOption, c.ForeignInterval)
	}
	if c.ForeignGap < 0 || c.ForeignGap%time.Millisecond != 0 {
		return c, fmt.Errorf("%w: redis: ForeignGap must be whole milliseconds, at least 1ms, got %v", backend.ErrInvalidOption, c.ForeignGap)
	}
	return c, nil
}

// fairArgs are the release script's arguments for c.ForeignInterval,
// c.ForeignGap and c.MixedFleet, the defaults filled in: the interval in
// ms ("0": no gaps), the gap in ms, and "1" for gaps on every lock.
func (c Config) fairArgs() [3]any {
	every, gap := c.ForeignInterval, c.ForeignGap
	if every == 0 {
		every = DefaultForeignInterval
	}
	if gap == 0 {
		gap = DefaultForeignGap
	}
	return [3]any{strconv.FormatInt(max(every.Milliseconds(), 0), 10), strconv.FormatInt(gap.Milliseconds(), 10), flag(c.MixedFleet)}
}

// New returns a Locker that keeps its locks in Redis through client, with
// the adapter's settings cfg (the zero Config is the default of every
// field). opts are the Locker's defaults (see backend.Option). Closing the
// Locker does not close client. Give client ContextTimeoutEnabled (as a
// Locker opened from a URL has): without it, go-redis waits out its read
// timeout on a server it cannot reach, whatever the context, so the adapter
// runs each request on a goroutine of its own and stops waiting for it when
// its context ends (the request goes on until the read timeout), which
// costs a goroutine hand-off per request.
func New(client Client, cfg Config, opts ...backend.Option) (*backend.Locker, error) {
	d, err := newDriver(client, cfg, nil)
	if err != nil {
		return nil, err
	}
	return backend.New(d, opts...)
}

var (
	//go:embed scripts/token.lua
	tokenLua string
	//go:embed scripts/queue.lua
	queueLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/refresh.lua
	refreshLua string
	//go:embed scripts/release.lua
	releaseLua string

	// The acquire and release scripts as sent (see withQueue).
	acquireSrc    = withQueue(acquireLua)
	acquireScript = goredis.NewScript(acquireSrc)
	refreshScript = goredis.NewScript(withQueue(refreshLua))
	releaseSrc    = withQueue(releaseLua)
	releaseScript = goredis.NewScript(releaseSrc)
)

// queueMark is the line of a script where the queue's functions go: after
// what the script does without them, since defining them costs every call
// (the uncontended acquire and release return before them).
const queueMark = "--#queue.lua\n"

// withQueue returns script as sent: the token function first, the queue's
// functions at its queueMark.
func withQueue(script string) string {
	if strings.Count(script, queueMark) != 1 {
		panic("redis: a script needs one line " + strings.TrimSpace(queueMark))
	}
	return tokenLua + strings.Replace(script, queueMark, queueLua, 1)
}

// redisDriver implements driver.Driver over one go-redis client.
type redisDriver struct {
	c     Client
	owned io.Closer // closed by Shutdown when the driver opened the client
	cfg   Config
	id    string // this driver's random id: the first part of every owner id
	// heedsCtx: the client bounds requests by their context (see
	// heedsContext); else bounded does.
	heedsCtx bool
	// do sends the acquire and release scripts, if the client can send
	// any command (see doer); nil: through Scripter.
	do  doer
	seq atomic.Uint64
	hub *hub
	// wakePrefix is the scripts' argument for the wake channels' prefix.
	wakePrefix any
	// fair are the release script's last arguments, boxed once (see
	// fairArgs).
	fair [3]any
	// lastLock is the lock the last acquisition named, with its keys
	// boxed for the scripts' argument lists: a process that takes one
	// lock again and again builds them once.
	lastLock atomic.Pointer[lockKeys]

	// short holds the nodes ("" for a client of one primary) whose last
	// WAIT counted fewer than Config.WaitReplicas replicas (see noteAcks).
	short sync.Map

	// Counters for tests and benchmarks.
	attempts  atomic.Int64 // acquire script calls
	tryAgains atomic.Int64 // scripts sent again while their slot migrated (see slotRetry)
	wakeups   atomic.Int64 // release notices delivered to waiting acquisitions

	mu     sync.Mutex
	closed bool
}

func newDriver(client Client, cfg Config, owned io.Closer) (*redisDriver, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redis: nil client", backend.ErrInvalidOption)
	}
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if cfg.WaitReplicas > 0 {
		_, isCluster := client.(masterForKey)
		_, isPipeliner := client.(pipeliner)
		if !isCluster && !isPipeliner {
			return nil, fmt.Errorf("%w: redis: WaitReplicas needs a client with Pipeline or MasterForKey (%T has neither)", backend.ErrInvalidOption, client)
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	d := &redisDriver{c: client, owned: owned, cfg: cfg, id: hex.EncodeToString(b[:]), heedsCtx: heedsContext(client),
		wakePrefix: wakeChannel(cfg.Prefix, "")}
	d.do, _ = client.(doer)
	d.fair = cfg.fairArgs()
	d.hub = newHub(client, wakeChannel(cfg.Prefix, d.id), &d.wakeups)
	return d, nil
}

// Capabilities implements driver.Driver.
func (d *redisDriver) Capabilities() driver.Capabilities {
	return ttlLimits.Capabilities(driver.Capabilities{Name: "redis", LockDelay: true})
}

// CheckTTL implements driver.Driver: ttlLimits' check (PX counts whole
// milliseconds).
func (d *redisDriver) CheckTTL(ttl time.Duration) error { return ttlLimits.Check(ttl) }

// NewLease implements driver.Driver. It sends nothing: the lease starts
// now, so that a waiter renews its queue entry (or learns that it cannot)
// from the start; the lock key carries its own expiry, which the acquire
// script starts.
func (d *redisDriver) NewLease(ctx context.Context, req driver.Request) (driver.Lease, time.Time, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, time.Time{}, fmt.Errorf("redis: %w", backend.ErrClosed)
	}
	started := time.Now()
	lk := d.lockKeys(req.Name)
	ttlMs := req.TTL.Milliseconds()
	// The end mark's key is the lock's end mark prefix and the owner id:
	// built as one string, whose tail is the owner id. The owner id
	// carries the TTL, so that a release can grant the lock to this
	// acquisition while it waits.
	var buf [128]byte
	b := append(buf[:0], lk.ended...)
	b = append(b, d.id...)
	b = append(b, '.')
	b = strconv.AppendUint(b, d.seq.Add(1), 36)
	if req.LockDelay > 0 {
		// The lock-delay in whole ms, rounded up, after the sequence
		// number (base 36, lower case: no 'D'); the scripts read it.
		b = append(b, 'D')
		b = strconv.AppendInt(b, (req.LockDelay + time.Millisecond - 1).Milliseconds(), 10)
	}
	b = append(b, '.')
	if req.Value != nil {
		b = append(b, candidateMark...)
	}
	b = strconv.AppendInt(b, ttlMs, 10)
	endMark := string(b)
	owner := endMark[len(lk.ended):]
	l := &lease{d: d, k: &lk.keys, owner: owner, ttlMs: ttlMs}
	copy(l.args[:6], lk.boxed[:])
	l.args[6], l.args[7], l.args[8] = endMark, owner, ttlMs
	if req.Value != nil {
		l.cand = newCandidate(lk.lock, owner, *req.Value, ttlMs)
	}
	return l, started, nil
}

// lockKeys returns the keys of lock name, built anew unless the last
// acquisition named the same lock.
func (d *redisDriver) lockKeys(name string) *lockKeys {
	if lk := d.lastLock.Load(); lk != nil && lk.name == name {
		return lk
	}
	k := keysOf(d.cfg.Prefix, name)
	lk := &lockKeys{name: name, keys: k, boxed: [6]any{k.lock, k.counter, k.queue, k.expiry, k.foreign, k.gap}}
	d.lastLock.Store(lk)
	return lk
}

// Shutdown implements driver.Driver: it stops the shared subscription and
// closes the client if the driver opened it. It asks the server for
// nothing, but closing the subscription waits for a dial of its
// connection in progress (go-redis holds the subscription's lock over the
// dial and the handshake, up to its dial timeout when the network is
// gone): Shutdown returns when ctx ends at the latest, and the closing
// goes on in the background until that dial gives up.
func (d *redisDriver) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		err := d.hub.close()
		if d.owned != nil {
			if cerr := d.owned.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("redis: close client: %w", cerr))
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// A context that had ended before the call: closing takes no time
	// unless a dial holds it up.
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("redis: close: the subscription's connection was still being dialled (it closes once the dial gives up): %w", ctx.Err())
	}
}

// keys are the Redis names of one lock. All carry the hash tag {<escaped
// name>}, so a Cluster keeps them in one slot.
type keys struct {
	lock, counter, queue, expiry string
	// foreign marks a lock on which another tool's holder was seen, gap
	// lives while a release leaves the lock free for other tools (see
	// Config.ForeignInterval).
	foreign, gap string
	ended        string // + owner: an acquisition's end mark
}

// lockKeys are the keys of the lock called name, and the first six
// (lock, counter, queue, expiry, foreign, gap) boxed as script arguments.
type lockKeys struct {
	name string
	keys
	boxed [6]any
}

func keysOf(prefix, name string) keys {
	base := prefix + ":{" + escapeName(name) + "}"
	return keys{lock: base, counter: base + ":token", queue: base + ":queue", expiry: base + ":queue:expiry",
		foreign: base + ":foreign", gap: base + ":gap", ended: base + ":ended:"}
}

// direct reports whether a release grants the lock to the next waiter
// itself (one message, no round trip of the waiter's), or only wakes it:
// with WaitReplicas, each grant must be followed by a WAIT on the
// connection that made it, so the waiter takes the lock with its own
// acquire script and WAIT.
func (d *redisDriver) direct() bool { return d.cfg.WaitReplicas == 0 }

// wakeChannel is the pub/sub channel of the driver with id under prefix:
// releases publish there when the next waiter is one of its acquisitions.
// The scripts derive it from a waiter's owner id ("<driver id>.<seq>").
func wakeChannel(prefix, id string) string {
	return prefix + ":wake:" + id
}

// escapeName escapes '%', '{', '}' and ':' as %XX. The result holds no brace,
// so it is exactly the key's hash tag, and no colon, so no name's keys are
// another name's; escaping '%' makes the mapping one-to-one.
func escapeName(name string) string {
	if !strings.ContainsAny(name, "%{}:") {
		return name
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '%', '{', '}', ':':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// LockKey returns the Redis key that holds lock name under prefix (empty:
// DefaultPrefix): hand it to redsync or bsm/redislock to make their holders
// and this package's exclude each other. Its token counter is LockKey +
// ":token".
func LockKey(prefix, name string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return keysOf(prefix, name).lock
}

type masterForKey interface {
	MasterForKey(ctx context.Context, key string) (*goredis.Client, error)
}

type pipeliner interface {
	Pipeline() goredis.Pipeliner
}

// acquireResult is the reply of the acquire script.
type acquireResult struct {
	granted bool
	token   int64 // if granted
	// If not granted: whether the acquisition is next in line (no earlier
	// waiter), and how long in ms until its turn may have come: the lock
	// key's remaining TTL if it is next (-1: the key has no expiry), else
	// the time left to the first waiter's queue entry.
	next bool
	wait int64
	// If not granted and next: the lock key holds a value that is not
	// fencelock's (redsync, bsm/redislock, an operator's SET), whose
	// release publishes nothing.
	foreign bool
}

// queueMode says what an acquire script that does not grant the lock does
// with the lock's queue.
type queueMode string

const (
	queueNo   queueMode = "0" // nothing: a TryAcquire, or a first try
	queueJoin queueMode = "1" // join it at the tail
	queueStay queueMode = "2" // renew the entry an earlier attempt made; lost if it is gone
)

// acquire runs the acquire script once (and WAIT after it if configured),
// bounded by ctx.
func (d *redisDriver) acquire(ctx context.Context, l *lease, mode queueMode) (acquireResult, error) {
	if d.unbounded(ctx) {
		return d.acquireOnce(ctx, l, mode)
	}
	return bounded(ctx, d, func() (acquireResult, error) { return d.acquireOnce(ctx, l, mode) })
}

// arg is m as a script argument (a constant: boxing it allocates nothing).
func (m queueMode) arg() any {
	switch m {
	case queueJoin:
		return string(queueJoin)
	case queueStay:
		return string(queueStay)
	}
	return string(queueNo)
}

// flag is b as a script argument, "1" or "0" (constants: boxing them
// allocates nothing).
func flag(b bool) any {
	if b {
		return "1"
	}
	return "0"
}

func (d *redisDriver) acquireOnce(ctx context.Context, l *lease, mode queueMode) (acquireResult, error) {
	d.attempts.Add(1)
	var cmd []any
	if l.cand == nil {
		cmd = make([]any, 0, 16)
		cmd = append(cmd, "evalsha", acquireHash, 7)
		cmd = append(cmd, l.args[:]...)
	} else {
		cmd = make([]any, 0, 19)
		cmd = append(cmd, "evalsha", acquireHash, 8)
		cmd = append(cmd, l.args[:7]...)
		cmd = append(cmd, l.cand.key)
		cmd = append(cmd, l.args[7:]...)
	}
	cmd = append(cmd, mode.arg(), flag(!d.cfg.NoClockFloor), d.wakePrefix, flag(d.direct()))
	if l.cand != nil {
		cmd = append(cmd, l.cand.value, l.cand.keyTTL)
	}
	if d.cfg.WaitReplicas == 0 {
		return parseAcquire(d.eval(ctx, tryAgainWithin(l.ttlMs), cmd, acquireScript, acquireSrc).Result())
	}
	return d.acquireWait(ctx, l, cmd)
}

// doer is a client that sends any command: go-redis's *Client,
// *ClusterClient and *Ring are. The driver sends its acquire and release
// scripts through Do with argument lists built once per acquisition:
// Scripter's EvalSha boxes every key and argument anew at each call.
type doer interface {
	Do(ctx context.Context, args ...any) *goredis.Cmd
}

// The acquire and release scripts' SHA1 digests, boxed once.
var (
	acquireHash any = acquireScript.Hash()
	releaseHash any = releaseScript.Hash()
)

// eval runs cmd, an EVALSHA of script (src: its source) with its
// arguments, and sends the source (EVAL) if the server does not have the
// script yet; it sends it again while its slot migrates, for up to
// within (see slotRetry). cmd is sent as it is, and changed for the EVAL.
func (d *redisDriver) eval(ctx context.Context, within time.Duration, cmd []any, script *goredis.Script, src string) *goredis.Cmd {
	r, err := slotRetry(ctx, d, within, func() (*goredis.Cmd, error) {
		r := d.evalOnce(ctx, cmd, script, src)
		return r, r.Err()
	})
	r.SetErr(err) // with the migration's error, if ctx ended the last try
	return r
}

// evalOnce is eval without slotRetry.
func (d *redisDriver) evalOnce(ctx context.Context, cmd []any, script *goredis.Script, src string) *goredis.Cmd {
	if d.do == nil {
		nkeys := cmd[2].(int)
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = cmd[3+i].(string)
		}
		return script.Run(ctx, d.c, keys, cmd[3+nkeys:]...)
	}
	r := d.do.Do(ctx, cmd...)
	if isNoScript(r.Err()) {
		cmd[0], cmd[1] = "eval", src
		r = d.do.Do(ctx, cmd...)
	}
	return r
}

// acquireWait sends cmd, the acquire script of l, and WAIT (see evalWait),
// and notes what WAIT said of lock's node (see noteAcks).
func (d *redisDriver) acquireWait(ctx context.Context, l *lease, cmd []any) (acquireResult, error) {
	budget := d.waitBudget(ctx, l.ttlMs)
	script, wait, node, err := d.evalWait(ctx, tryAgainWithin(l.ttlMs), l.k.lock, cmd, acquireSrc, budget, isGrant)
	if err != nil {
		return acquireResult{}, err
	}
	res, err := parseAcquire(script.Result())
	if wait == nil {
		return res, err // refused, and WAIT not sent
	}
	if acks, werr := wait.Int64(); werr == nil && err == nil {
		d.noteAcks(node, acks, res.granted)
	}
	if err != nil || !res.granted {
		return res, err
	}
	if err := d.checkAcks(wait, "the grant", budget); err != nil {
		return res, err
	}
	return res, nil
}

// isGrant reports whether an acquire script's reply is a grant (a token,
// as a string; a refusal is an array).
func isGrant(script *goredis.Cmd) bool {
	_, ok := script.Val().(string)
	return ok
}

// waitBudget is how long the WAITs after a script of an acquisition whose
// TTL is ttlMs may wait in all under ctx (see evalWait):
// Config.WaitTimeout, at most half the TTL (the grant's lifetime counts
// from before the script: one confirmed later would leave its holder less
// than half of it, and one confirmed after the lease's local deadline
// would be lost at once), and at most three quarters of what is left of
// ctx (so that WAIT's own answer comes back before ctx ends: the
// acquisition then knows that the grant is not replicated, not only that
// it had no answer).
func (d *redisDriver) waitBudget(ctx context.Context, ttlMs int64) time.Duration {
	b := min(d.cfg.WaitTimeout, time.Duration(ttlMs)*time.Millisecond/2)
	if dl, ok := ctx.Deadline(); ok {
		b = min(b, time.Until(dl)*3/4)
	}
	return b
}

// noteAcks records what a WAIT said of node (its address; "" for a
// client of one primary): a WAIT that counted fewer than
// Config.WaitReplicas replicas marks it short of replicas, and one that
// counted enough after a grant (a write of its connection, which only
// replicas that are up to date acknowledge) clears the mark. A refusal's
// WAIT that counted enough proves nothing (its connection may not have
// written since the replicas went away) and leaves the mark as it is.
func (d *redisDriver) noteAcks(node string, acks int64, granted bool) {
	switch {
	case acks < int64(d.cfg.WaitReplicas):
		d.short.Store(node, struct{}{})
	case granted:
		d.short.Delete(node)
	}
}

// replicasShort reports whether node's last WAIT counted too few replicas
// (see noteAcks).
func (d *redisDriver) replicasShort(node string) bool {
	_, ok := d.short.Load(node)
	return ok
}

// evalWait sends cmd, an EVALSHA of a script (src: its source) that
// writes under lock (the lock key, which names the Cluster node), and
// WAIT on the same connection: WAIT counts the replicas that have this
// connection's writes. The WAITs it sends wait budget in all (each for
// what is left of it, 1ms at least: WAIT 0 waits forever), the tries
// while a slot migrates included. It returns the replies, and the address
// of the node for a cluster ("" otherwise).
//
// Both go in one pipeline (one round trip), unless needWait is given and
// the node is short of replicas (see noteAcks) and the client lends one
// connection (*goredis.Client's Conn: a Sentinel client, a cluster's
// node): then the script goes first and WAIT after it only if
// needWait(script reply), on the same connection, so that a reply that
// needs none (a refusal) does not wait for replicas that are away; WAIT
// is then nil if not sent. In a pipeline WAIT runs whatever the script
// did, and waits for replicas whenever the connection's last write is not
// on them yet.
//
// After a NOSCRIPT it sends the script again, with EVAL. A request to one
// cluster node does not follow redirections: after a MOVED (the slot has
// another master, after a failover), which the node answers without
// running the script, it reloads the slot map and sends again, to the new
// master, once. While the slot migrates (the node answers TRYAGAIN or
// ASK) it sends them again for up to within (see slotRetry). The error is
// one of reaching the node; the script's and WAIT's are in their replies.
func (d *redisDriver) evalWait(ctx context.Context, within time.Duration, lock string, cmd []any, src string, budget time.Duration,
	needWait func(*goredis.Cmd) bool) (script, wait *goredis.Cmd, node string, err error) {
	end := time.Now().Add(budget)
	type replies struct {
		script, wait *goredis.Cmd
		node         string
	}
	r, err := slotRetry(ctx, d, within, func() (replies, error) {
		script, wait, node, err := d.evalWaitOnce(ctx, lock, cmd, src, end, needWait)
		if err != nil {
			return replies{}, err
		}
		return replies{script, wait, node}, script.Err()
	})
	if r.script == nil {
		return nil, nil, "", err
	}
	r.script.SetErr(err) // with the migration's error, if ctx ended the last try
	return r.script, r.wait, r.node, nil
}

// evalWaitOnce is evalWait without slotRetry; its WAITs end by end.
func (d *redisDriver) evalWaitOnce(ctx context.Context, lock string, cmd []any, src string, end time.Time,
	needWait func(*goredis.Cmd) bool) (script, wait *goredis.Cmd, node string, err error) {
	waitMs := func() int64 { return max(time.Until(end).Milliseconds(), 1) }
	var movedFrom string // the node that answered MOVED
	for {
		var c pipeliner
		node = ""
		if mc, ok := d.c.(masterForKey); ok {
			n, err := mc.MasterForKey(ctx, lock)
			if err != nil {
				return nil, nil, "", mapErr(err)
			}
			c, node = n, n.Options().Addr
		} else {
			c = d.c.(pipeliner)
		}
		lender, canLend := c.(connLender)
		if needWait != nil && canLend && d.replicasShort(node) {
			script, wait = d.evalThenWait(ctx, lender.Conn(), cmd, src, waitMs, needWait)
		} else {
			p := c.Pipeline()
			script = p.Do(ctx, cmd...)
			wait = p.Do(ctx, "WAIT", d.cfg.WaitReplicas, waitMs())
			_, _ = p.Exec(ctx)
			if isNoScript(script.Err()) && cmd[0] != "eval" {
				cmd[0], cmd[1] = "eval", src
				continue
			}
		}
		if goredis.HasErrorPrefix(script.Err(), "MOVED") && movedFrom == "" && node != "" {
			movedFrom = node
			if d.reloadSlots(ctx, lock, node) {
				continue
			}
		}
		return script, wait, node, nil
	}
}

// connLender is a client that lends one connection of its pool: go-redis's
// *Client (also as a Sentinel client or a cluster's node).
type connLender interface {
	Conn() *goredis.Conn
}

// evalThenWait sends cmd (see evalWait) on conn, again as EVAL after a
// NOSCRIPT, then WAIT for waitMs() on conn if needWait(script reply)
// (wait is nil if not), and gives conn back to its pool. conn sends
// nothing on another connection: a command after one whose connection
// broke fails, so WAIT never counts another connection's writes.
func (d *redisDriver) evalThenWait(ctx context.Context, conn *goredis.Conn, cmd []any, src string, waitMs func() int64,
	needWait func(*goredis.Cmd) bool) (script, wait *goredis.Cmd) {
	defer conn.Close()
	script = conn.Do(ctx, cmd...)
	if isNoScript(script.Err()) && cmd[0] != "eval" {
		cmd[0], cmd[1] = "eval", src
		script = conn.Do(ctx, cmd...)
	}
	if script.Err() == nil && needWait(script) {
		wait = conn.Do(ctx, "WAIT", d.cfg.WaitReplicas, waitMs())
	}
	return script, wait
}

// reloadSlots has a cluster client reload its slot map, which it does in
// the background, and waits (up to 1s, and ctx) until lock's master is
// another node than from. false if it did not move.
func (d *redisDriver) reloadSlots(ctx context.Context, lock, from string) bool {
	c, ok := d.c.(interface {
		masterForKey
		ReloadState(context.Context)
	})
	if !ok {
		return false
	}
	c.ReloadState(ctx)
	for range 100 {
		if node, err := c.MasterForKey(ctx, lock); err == nil && node.Options().Addr != from {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return false
}

// checkAcks reads the reply of the WAIT that followed what (a write),
// within budget: an error unless Config.WaitReplicas replicas acknowledged
// it.
func (d *redisDriver) checkAcks(wait *goredis.Cmd, what string, budget time.Duration) error {
	acks, err := wait.Int64()
	if err != nil {
		return fmt.Errorf("redis: WAIT after %s: %w", what, mapErr(err))
	}
	if acks < int64(d.cfg.WaitReplicas) {
		return fmt.Errorf("%w: %w: %d of %d replicas within %v", backend.ErrUnavailable, ErrNotReplicated,
			acks, d.cfg.WaitReplicas, budget.Round(time.Millisecond))
	}
	return nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// parseAcquire reads the acquire script's reply: a grant's token (a
// string of digits), or an array of integers.
func parseAcquire(reply any, err error) (acquireResult, error) {
	if err != nil {
		return acquireResult{}, fmt.Errorf("redis: acquire script: %w", mapErr(err))
	}
	if s, ok := reply.(string); ok {
		if token, err := strconv.ParseInt(s, 10, 64); err == nil && token > 0 {
			return acquireResult{granted: true, token: token}, nil
		}
		return acquireResult{}, fmt.Errorf("redis: acquire script returned %q", s)
	}
	vs, _ := reply.([]any)
	res := make([]int64, len(vs))
	for i, v := range vs {
		n, ok := v.(int64)
		if !ok {
			return acquireResult{}, fmt.Errorf("redis: acquire script returned %v", reply)
		}
		res[i] = n
	}
	switch {
	case len(res) == 4 && res[0] == 0:
		return acquireResult{next: res[2] == 1, wait: res[1], foreign: res[3] == 1}, nil
	case len(res) == 1 && res[0] == -1:
		return acquireResult{}, fmt.Errorf("%w: redis: queue entry lapsed or was removed, or the acquisition had ended", backend.ErrDeleted)
	}
	return acquireResult{}, fmt.Errorf("redis: acquire script returned %v", reply)
}
