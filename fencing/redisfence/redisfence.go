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
// Known defect: go-redis retries a command whose answer timed out
// (MaxRetries, default 3). If the first run of Do's script was applied and
// only its answer came late (the process was paused past its read
// deadline), the retry finds the higher token that another holder admitted
// meanwhile, and Do reports a *StaleTokenError for a write that landed
// (found by the chaos campaign). Give the guard a client with MaxRetries
// -1: Do then returns the timeout, and the write's outcome is unknown, as
// it is.
package redisfence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/fencing"
)

//go:embed fence.lua
var fenceLua string

var fenceScript = redis.NewScript(fenceLua)

// Guard is a fencing.StoreGuard[*Batch] over a Redis server.
type Guard struct {
	c        redis.Scripter
	tokenKey func(resource string) string
	ins      *fencing.Instruments
}

// Option configures a Guard made by New.
type Option func(*Guard)

// WithTokenKey sets the key the token of a resource is kept in (default
// TokenKey, "{resource}:fence"). In Redis Cluster it must hash to the slot
// of the resource's data keys.
func WithTokenKey(f func(resource string) string) Option { return func(g *Guard) { g.tokenKey = f } }

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
	g := &Guard{c: c, tokenKey: TokenKey}
	for _, o := range opts {
		o(g)
	}
	if g.tokenKey == nil {
		return nil, errors.New("redisfence: New: WithTokenKey(nil)")
	}
	return g, nil
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
	res, err := fenceScript.Run(ctx, g.c, append([]string{key}, b.keys...), append([]any{token.String()}, b.args...)...).Slice()
	if err != nil {
		return err
	}
	if len(res) != 2 {
		return fmt.Errorf("redisfence: unexpected script reply %v", res)
	}
	if ok, _ := res[0].(int64); ok == 1 {
		return nil
	}
	s, _ := res[1].(string)
	highest, err := fencing.ParseToken(s)
	if err != nil {
		return fmt.Errorf("redisfence: token key %q holds %q: %w", key, s, err)
	}
	return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: highest}
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
