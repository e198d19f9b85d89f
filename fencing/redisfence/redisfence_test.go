package redisfence_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/fencing/redisfence"
	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/redistest"
)

type store struct {
	*redisfence.Guard
	c *redis.Client
}

func valueKey(res string) string { return "{" + res + "}:value" }

func (s store) Put(res, v string) func(context.Context, *redisfence.Batch) error {
	return func(_ context.Context, b *redisfence.Batch) error {
		b.Set(valueKey(res), v)
		return nil
	}
}

func (s store) Get(ctx context.Context, res string) (string, error) {
	v, err := s.c.Get(ctx, valueKey(res)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t, redistest.WithPersistence())
	var mu sync.Mutex
	seen := map[*testing.T]bool{}
	fencetest.Run(t, fencetest.Harness[*redisfence.Batch]{
		Rollback: true,
		Kind:     "redis",
		Open: func(t *testing.T, tel fencing.Telemetry) fencetest.Store[*redisfence.Batch] {
			c := srv.NewClient(t)
			mu.Lock()
			first := !seen[t]
			seen[t] = true
			mu.Unlock()
			if first {
				require.NoError(t, c.FlushAll(context.Background()).Err())
			}
			return store{newGuard(t, c, redisfence.WithTelemetry(tel)), c}
		},
		Restart: func(t *testing.T) { require.NoError(t, srv.Restart()) },
		Unreachable: func(t *testing.T, tel fencing.Telemetry) fencing.StoreGuard[*redisfence.Batch] {
			port, err := freeport.Port()
			require.NoError(t, err)
			c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			return newGuard(t, c, redisfence.WithTelemetry(tel))
		},
	})
}

func TestScriptOps(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient(t)
	ctx := context.Background()
	g := newGuard(t, c)
	require.NoError(t, c.Set(ctx, "{r}:old", "x", 0).Err())
	require.NoError(t, g.Do(ctx, "r", 5, func(_ context.Context, b *redisfence.Batch) error {
		b.Set("{r}:a", "1")
		b.HSet("{r}:h", "f", "v")
		b.Del("{r}:old")
		return nil
	}))
	assert.Equal(t, "1", c.Get(ctx, "{r}:a").Val())
	assert.Equal(t, "v", c.HGet(ctx, "{r}:h", "f").Val())
	assert.Equal(t, int64(0), c.Exists(ctx, "{r}:old").Val())
	assert.Equal(t, "5", c.Get(ctx, redisfence.TokenKey("r")).Val())

	// A failing op is found before anything is written.
	err := g.Do(ctx, "r", 6, func(_ context.Context, b *redisfence.Batch) error {
		b.Set("{r}:a", "2")
		b.HSet("{r}:a2", "f", "v")
		b.HSet("{r}:a", "f", "v") // {r}:a is a string
		return nil
	})
	require.ErrorContains(t, err, "WRONGTYPE")
	assert.Equal(t, "1", c.Get(ctx, "{r}:a").Val())
	h, err := g.Highest(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, fencing.Token(5), h)

	// Tokens beyond 2^53 compare exactly (Lua numbers would not).
	big := fencing.Token(1<<60 + 1)
	require.NoError(t, g.Admit(ctx, "big", big))
	assert.ErrorIs(t, g.Admit(ctx, "big", big-1), fencing.ErrStaleToken)
	require.NoError(t, g.Admit(ctx, "big", ^fencing.Token(0)))

	// After SCRIPT FLUSH the script is sent again.
	require.NoError(t, c.ScriptFlush(ctx).Err())
	require.NoError(t, g.Admit(ctx, "r", 7))
}

func newGuard(t *testing.T, c redis.Scripter, opts ...redisfence.Option) *redisfence.Guard {
	g, err := redisfence.New(c, opts...)
	require.NoError(t, err)
	return g
}

// The Batch is the atomic handle: a token admitted while the write
// function runs (nothing is held meanwhile) makes the script discard what
// was staged on b, while a SET sent on the client directly in the same
// write function has landed already.
func TestBatchIsTheAtomicHandle(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient(t)
	ctx := context.Background()
	g, other := newGuard(t, c), newGuard(t, srv.NewClient(t))
	require.NoError(t, g.Do(ctx, "r", 5, func(_ context.Context, b *redisfence.Batch) error {
		b.Set("{r}:body", "by 5")
		return nil
	}))
	err := g.Do(ctx, "r", 5, func(ctx context.Context, b *redisfence.Batch) error {
		require.NoError(t, other.Admit(ctx, "r", 6)) // a newer holder, during the write
		b.Set("{r}:body", "by 5, staged")
		return c.Set(ctx, "{r}:escaped", "by 5, on the client", 0).Err()
	})
	var st *fencing.StaleTokenError
	require.ErrorAs(t, err, &st)
	assert.Equal(t, fencing.StaleTokenError{Resource: "r", Token: 5, Highest: 6}, *st)
	assert.Equal(t, "by 5", c.Get(ctx, "{r}:body").Val(), "the staged SET was discarded")
	assert.Equal(t, "by 5, on the client", c.Get(ctx, "{r}:escaped").Val(), "a command on the client escapes the fence")

	// The Gate's write function runs under the same check, with no Batch.
	ran := false
	err = g.Gate().Do(ctx, "r", 5, func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, fencing.ErrStaleToken)
	assert.False(t, ran, "the pre-check turns an already stale token away")
}

func TestNewOptions(t *testing.T) {
	_, err := redisfence.New(nil)
	assert.Error(t, err)
	srv := redistest.Start(t)
	c := srv.NewClient(t)
	_, err = redisfence.New(c, redisfence.WithTokenKey(nil))
	assert.Error(t, err)
	ctx := context.Background()
	g := newGuard(t, c, redisfence.WithTokenKey(func(r string) string { return "fences:" + r }))
	require.NoError(t, g.Admit(ctx, "r", 4))
	assert.Equal(t, "4", c.Get(ctx, "fences:r").Val())
}
