package redisfence_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/fencing/redisfence"
	"github.com/fencelock/fencelock/internal/redistest"
)

type store struct {
	*redisfence.Guard
	c *redis.Client
}

func valueKey(res string) string { return "{" + res + "}:value" }

func (s store) Put(res, v string) func(context.Context) error {
	return func(ctx context.Context) error {
		redisfence.Batch(ctx).Set(valueKey(res), v)
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
	fencetest.Run(t, fencetest.Harness{
		Rollback: true,
		Open: func(t *testing.T) fencetest.Store {
			c := srv.NewClient(t)
			mu.Lock()
			first := !seen[t]
			seen[t] = true
			mu.Unlock()
			if first {
				require.NoError(t, c.FlushAll(context.Background()).Err())
			}
			return store{redisfence.New(c), c}
		},
		Restart: func(t *testing.T) { require.NoError(t, srv.Restart()) },
	})
}

func TestScriptOps(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient(t)
	ctx := context.Background()
	g := redisfence.New(c)
	require.NoError(t, c.Set(ctx, "{r}:old", "x", 0).Err())
	require.NoError(t, g.Do(ctx, "r", 5, func(ctx context.Context) error {
		b := redisfence.Batch(ctx)
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
	err := g.Do(ctx, "r", 6, func(ctx context.Context) error {
		b := redisfence.Batch(ctx)
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
	require.NoError(t, fencing.Admit(ctx, g, "big", big))
	assert.ErrorIs(t, fencing.Admit(ctx, g, "big", big-1), fencing.ErrStaleToken)
	require.NoError(t, fencing.Admit(ctx, g, "big", ^fencing.Token(0)))

	// After SCRIPT FLUSH the script is sent again.
	require.NoError(t, c.ScriptFlush(ctx).Err())
	require.NoError(t, fencing.Admit(ctx, g, "r", 7))
}
