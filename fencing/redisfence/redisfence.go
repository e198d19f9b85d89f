// Package redisfence keeps fencing tokens in Redis next to the data they
// protect: one Lua script checks the resource's token, applies the write's
// staged commands and records the token, atomically (Redis runs nothing else
// while a script runs).
//
// A write function stages its commands on Batch(ctx) (Set, HSet, Del); they
// are sent with the check, so they land only if the token is admitted.
// Keys: the token key of resource r is "{r}:fence" by default; in Redis
// Cluster every key a write touches must hash to the same slot, so name data
// keys with the same hash tag ("{r}:body").
//
// Durability is Redis's: without appendfsync always, or with asynchronous
// replication and failover, an acknowledged write (and its token) can be lost
// together. They are never split: the token and the data are in one script.
// Scripts are sent with EVALSHA and fall back to EVAL after a restart or
// SCRIPT FLUSH (NOSCRIPT).
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

// Guard is a fencing.Guard over a Redis server.
type Guard struct {
	c        redis.Scripter
	tokenKey func(resource string) string
}

// Option configures a Guard.
type Option func(*Guard)

// WithTokenKey sets the key the token of a resource is kept in.
func WithTokenKey(f func(resource string) string) Option { return func(g *Guard) { g.tokenKey = f } }

// TokenKey is the default token key of resource: "{resource}:fence".
func TokenKey(resource string) string { return "{" + resource + "}:fence" }

// New returns a Guard using c (a *redis.Client, *redis.ClusterClient, ...).
func New(c redis.Scripter, opts ...Option) *Guard {
	g := &Guard{c: c, tokenKey: TokenKey}
	for _, o := range opts {
		o(g)
	}
	return g
}

// Ops is the staged writes of one Do.
type Ops struct {
	keys []string
	args []any
}

// Set stages SET key value.
func (o *Ops) Set(key, value string) { o.add("SET", key, value) }

// HSet stages HSET key field value.
func (o *Ops) HSet(key, field, value string) { o.add("HSET", key, field, value) }

// Del stages DEL key.
func (o *Ops) Del(key string) { o.add("DEL", key) }

func (o *Ops) add(name, key string, args ...string) {
	o.keys = append(o.keys, key)
	o.args = append(o.args, name, len(args))
	for _, a := range args {
		o.args = append(o.args, a)
	}
}

type opsKey struct{}

// Batch returns the staged writes of the Do whose write function received
// ctx (nil outside one). They are applied with the token check, or not at all.
func Batch(ctx context.Context) *Ops {
	o, _ := ctx.Value(opsKey{}).(*Ops)
	return o
}

// Do implements fencing.Guard. It first reads the token so that an already
// stale write is turned away before write runs; the script then checks again,
// atomically with applying the staged ops. (If a higher token is admitted
// between the two, write has run but its ops are discarded.) If write returns
// an error nothing is sent.
func (g *Guard) Do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context) error) error {
	if token == 0 {
		return fmt.Errorf("%w: zero token", fencing.ErrInvalidToken)
	}
	key := g.tokenKey(resource)
	if write != nil {
		cur, err := g.highest(ctx, key)
		if err != nil {
			return err
		}
		if token < cur {
			return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: cur}
		}
	}
	ops := &Ops{}
	if write != nil {
		if err := write(context.WithValue(ctx, opsKey{}, ops)); err != nil {
			return err
		}
	}
	res, err := fenceScript.Run(ctx, g.c, append([]string{key}, ops.keys...), append([]any{token.String()}, ops.args...)...).Slice()
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
