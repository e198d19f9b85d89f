// Package redisfence keeps fencing tokens in Redis next to the data they
// protect: one Lua script checks the resource's token, applies the write's
// staged commands and records the token, atomically (Redis runs nothing else
// while a script runs).
//
// Guard.Do hands the write function a *Batch; the commands it stages there
// (Set, HSet, Del) are sent with the check, so they land only if the token
// is admitted:
//
//	g, err := redisfence.New(rdb) // option: WithTokenKey
//	err = g.Do(ctx, "report", token, func(ctx context.Context, b *redisfence.Batch) error {
//		b.Set("{report}:body", body)
//		return nil
//	})
//
// A command sent on the client itself instead lands whatever the token.
// Guard.Gate is the same guard as a plain fencing.Guard for store-agnostic
// code (httpfence.Middleware); its write function gets no Batch.
//
// Keys: the token key of resource r is "{r}:fence" by default; in Redis
// Cluster every key a write touches must hash to the same slot, so name data
// keys with the same hash tag ("{r}:body").
//
// Durability is Redis's: without appendfsync always, or with asynchronous
// replication and failover, an acknowledged write (and its token) can be lost
// together. They are never split: the token and the data are in one script.
// Scripts are sent with EVALSHA and fall back to EVAL after a restart or
// SCRIPT FLUSH (NOSCRIPT).
//
// # Lost answers and retries
//
// A client can lose the answer to a script that Redis ran: the connection
// drops or times out after the script was sent. go-redis then sends the
// same script again (MaxRetries, 3 by default), and by then a newer holder
// may have admitted a higher token. Every Do therefore carries a call id
// (128 random bits), and the run of the script that applies the write
// records it, in the same atomic step, in a key of its own that expires
// after the replay window (WithReplayWindow, default DefaultReplayWindow):
//
//	{r}:fence:call:<id>   for the default token key {r}:fence
//
// (the token key with ":call:<id>" appended, in the token key's hash slot;
// a token key without a hash tag becomes one: "{fences:r}:call:<id>", so in
// Redis Cluster a token key with a '}' must have a hash tag). A later run of
// the same call finds its record and returns the first run's result,
// applying nothing twice: a retried Do reports what happened, with any
// client configuration, and one script call per write as before. The
// records are the cost: about 150 bytes of Redis memory per write for the
// window (measured on Redis 7.0; 18 MB at 1,000 writes/s with the default
// window).
//
// What is left unknown is reported as such: Do returns an
// *fencing.OutcomeUnknownError (errors.Is(err, fencing.ErrOutcomeUnknown))
// when the script may have run and no answer says whether it did (a
// timeout, a closed connection, a context that ended while the script was
// sent or answered; a client that retries may fail to reconnect after its
// first attempt ran, so a refused connection is unknown too), and when a
// stale answer comes more than half the replay window after the script was
// first sent (the record of an earlier run may have expired). Check the
// data to learn whether such a write landed. A *fencing.StaleTokenError
// means the write did not land, as long as the server's clock does not jump
// ahead by half the window.
package redisfence

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/fencing"
)

//go:embed fence.lua
var fenceLua string

var fenceScript = redis.NewScript(fenceLua)

// DefaultReplayWindow is how long a Guard made without WithReplayWindow
// keeps the record of an applied write.
const DefaultReplayWindow = 2 * time.Minute

// Guard is a fencing.StoreGuard[*Batch] over a Redis server.
type Guard struct {
	c        redis.Scripter
	tokenKey func(resource string) string
	window   time.Duration
	ins      *fencing.Instruments
}

// Option configures a Guard made by New.
type Option func(*Guard)

// WithTokenKey sets the key the token of a resource is kept in (default
// TokenKey, "{resource}:fence"). In Redis Cluster it must hash to the slot
// of the resource's data keys.
func WithTokenKey(f func(resource string) string) Option { return func(g *Guard) { g.tokenKey = f } }

// WithReplayWindow sets how long the record of an applied write is kept
// (default DefaultReplayWindow, 2 minutes; at least a second): a retry of
// its script within the window returns the first run's result, and a
// stale answer that comes more than half the window after the script was
// first sent is reported as fencing.ErrOutcomeUnknown. It must exceed
// the longest time the client may take to retry a command (go-redis's
// defaults: 4 attempts of up to a dial, a write and a read timeout each,
// 5+3+3 s, about 45 s in all) for retries to be answered truly rather than
// as unknown. The cost is memory: one key of about 150 bytes per write for
// the window.
func WithReplayWindow(d time.Duration) Option { return func(g *Guard) { g.window = d } }

// WithTelemetry makes the Guard report its decisions, durations and spans
// (kind "redis"; see fencing.Telemetry) for every Do, Admit and Gate
// included (default: the zero Telemetry, off).
func WithTelemetry(t fencing.Telemetry) Option {
	return func(g *Guard) { g.ins = t.Instruments("redis") }
}

// TokenKey is the default token key of resource: "{resource}:fence".
func TokenKey(resource string) string { return "{" + resource + "}:fence" }

// New returns a Guard using c (a *redis.Client, *redis.ClusterClient, ...).
func New(c redis.Scripter, opts ...Option) (*Guard, error) {
	if c == nil {
		return nil, errors.New("redisfence: New: nil client")
	}
	g := &Guard{c: c, tokenKey: TokenKey, window: DefaultReplayWindow}
	for _, o := range opts {
		o(g)
	}
	if g.tokenKey == nil {
		return nil, errors.New("redisfence: New: WithTokenKey(nil)")
	}
	if g.window < time.Second {
		return nil, fmt.Errorf("redisfence: New: replay window %v is under a second", g.window)
	}
	return g, nil
}

// recordKey is the key that records the call id's applied run: in the
// token key's hash slot, the token key's hash tag kept or the token key
// made one.
func recordKey(tokenKey, id string) string {
	if i := strings.IndexByte(tokenKey, '{'); i >= 0 {
		if j := strings.IndexByte(tokenKey[i+1:], '}'); j > 0 {
			return tokenKey + ":call:" + id
		}
	}
	return "{" + tokenKey + "}:call:" + id
}

// Batch is the commands one Do stages: they are sent in the script that
// checks the token and applied only if it is admitted. A Batch is valid only
// during the write function it was handed to.
type Batch struct {
	keys []string
	args []any
}

// Set stages SET key value.
func (b *Batch) Set(key, value string) { b.add("SET", key, value) }

// HSet stages HSET key field value.
func (b *Batch) HSet(key, field, value string) { b.add("HSET", key, field, value) }

// Del stages DEL key.
func (b *Batch) Del(key string) { b.add("DEL", key) }

func (b *Batch) add(name, key string, args ...string) {
	b.keys = append(b.keys, key)
	b.args = append(b.args, name, len(args))
	for _, a := range args {
		b.args = append(b.args, a)
	}
}

// Do implements fencing.StoreGuard[*Batch]. It first reads the token so that
// an already stale write is turned away before write runs; then write stages
// its commands on b, and one script checks the token again, atomically with
// applying them and recording the token. If a higher token is admitted
// while write runs, the script discards the staged commands and Do returns
// the *fencing.StaleTokenError. If write returns an error nothing is sent. A
// nil write records the token alone (see Admit).
//
// A script whose answer is lost and that the client sends again returns
// the first run's result (nil if it was applied); an outcome Do cannot
// know is a *fencing.OutcomeUnknownError (see the package doc).
func (g *Guard) Do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context, b *Batch) error) error {
	ctx, obs := g.ins.Start(ctx, resource, token)
	err := g.do(ctx, resource, token, write)
	obs.End(err)
	return err
}

func (g *Guard) do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context, b *Batch) error) error {
	if token == 0 {
		return fmt.Errorf("%w: zero token", fencing.ErrInvalidToken)
	}
	key := g.tokenKey(resource)
	b := &Batch{}
	if write != nil {
		cur, err := g.highest(ctx, key)
		if err != nil {
			return err
		}
		if token < cur {
			return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: cur}
		}
		if err := write(ctx, b); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err // nothing sent
	}
	keys := append([]string{key, recordKey(key, rand.Text())}, b.keys...)
	args := append([]any{token.String(), g.window.Milliseconds()}, b.args...)
	sent := time.Now()
	res, err := fenceScript.Run(ctx, g.c, keys, args...).Slice()
	// A stale answer is true if a run that applied this call would have
	// left its record for it to find; past half the window (for clocks
	// that do not tick alike) the record may be gone.
	late := time.Since(sent) >= g.window/2
	if err != nil {
		if refused(err) && !late {
			return err
		}
		return &fencing.OutcomeUnknownError{Resource: resource, Token: token, Err: err}
	}
	if len(res) != 2 {
		return fmt.Errorf("redisfence: unexpected script reply %v", res)
	}
	if ok, _ := res[0].(int64); ok != 0 {
		return nil // applied, by this run (1) or an earlier one (2)
	}
	s, _ := res[1].(string)
	highest, err := fencing.ParseToken(s)
	if err != nil {
		return fmt.Errorf("redisfence: token key %q holds %q: %w", key, s, err)
	}
	if late {
		return &fencing.OutcomeUnknownError{Resource: resource, Token: token,
			Err: fmt.Errorf("redisfence: token %d is stale now (%d was admitted), but the answer came %v after the script was sent, past half the replay window (%v): a run of it may have been applied before its record expired", token, highest, time.Since(sent).Round(time.Millisecond), g.window)}
	}
	return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: highest}
}

// refused says err is Redis refusing the script in a way that no run of it
// can have been applied before: the script's own checks (which come after
// the record's), a key of the wrong type, keys in different slots. Any
// other error (a timeout, a closed or refused connection, READONLY or
// LOADING after a failover or restart) may follow an earlier attempt that
// ran.
func refused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.Contains(msg, "redisfence: ") || strings.HasPrefix(msg, "WRONGTYPE ") || strings.HasPrefix(msg, "CROSSSLOT ")
}

// Admit records token for resource without a write of its own (rejecting a
// lower one), in one script.
func (g *Guard) Admit(ctx context.Context, resource string, token fencing.Token) error {
	return g.Do(ctx, resource, token, nil)
}

// Gate returns g as a fencing.Guard for store-agnostic code
// (httpfence.Middleware, fencing.Admit). Its write function gets no Batch
// and runs between the pre-check and the script, holding nothing: the token
// is recorded only if it returns nil and is still not stale, but nothing the
// function does is part of the script, and a higher token may be admitted
// while it runs. To change Redis atomically with the check, use Do and b.
func (g *Guard) Gate() fencing.Guard { return fencing.Gate[*Batch](g) }

// Highest returns the highest token admitted for resource (0 if none).
func (g *Guard) Highest(ctx context.Context, resource string) (fencing.Token, error) {
	return g.highest(ctx, g.tokenKey(resource))
}

type getter interface {
	Get(ctx context.Context, key string) *redis.StringCmd
}

func (g *Guard) highest(ctx context.Context, key string) (fencing.Token, error) {
	c, ok := g.c.(getter)
	if !ok {
		return 0, nil // no pre-check: the script still checks
	}
	s, err := c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redisfence: token key %q holds %q", key, s)
	}
	return fencing.Token(v), nil
}
