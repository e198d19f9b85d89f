package redisfence_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/fencing/redisfence"
	"github.com/fencelock/fencelock/internal/faultproxy"
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
		// go-redis's defaults: a command whose answer is lost is sent
		// again (MaxRetries 3).
		Remote: func(t *testing.T) (fencetest.Store[*redisfence.Batch], fencetest.Link) {
			p, err := faultproxy.Start(srv.Addr())
			require.NoError(t, err)
			t.Cleanup(p.Close)
			c := redis.NewClient(&redis.Options{Addr: p.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return store{newGuard(t, c), c}, p
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

// recordKeys returns the keys matching pattern (the records of applied
// calls, "{r}:fence:call:*" for resource r).
func recordKeys(t *testing.T, c *redis.Client, pattern string) []string {
	t.Helper()
	keys, err := c.Keys(context.Background(), pattern).Result()
	require.NoError(t, err)
	return keys
}

// Every applied Do leaves a record of its call that expires with the
// replay window; a stale one leaves none.
func TestCallRecords(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient(t)
	ctx := context.Background()
	_, err := redisfence.New(c, redisfence.WithReplayWindow(999*time.Millisecond))
	require.Error(t, err, "a window under a second")

	g := newGuard(t, c, redisfence.WithReplayWindow(5*time.Second))
	require.NoError(t, g.Admit(ctx, "r", 5))
	require.NoError(t, g.Do(ctx, "r", 5, func(_ context.Context, b *redisfence.Batch) error {
		b.Set("{r}:v", "x")
		return nil
	}))
	require.ErrorIs(t, g.Admit(ctx, "r", 4), fencing.ErrStaleToken)
	keys := recordKeys(t, c, "{r}:fence:call:*")
	require.Len(t, keys, 2, "one record per applied Do")
	for _, k := range keys {
		pttl, err := c.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.True(t, pttl > 0 && pttl <= 5*time.Second, "%s expires within the window: %v", k, pttl)
	}

	// A token key without a hash tag becomes the tag of its records.
	plain := newGuard(t, c, redisfence.WithTokenKey(func(r string) string { return "fences:" + r }))
	require.NoError(t, plain.Admit(ctx, "r", 1))
	require.Len(t, recordKeys(t, c, "{fences:r}:call:*"), 1)
}

// In a Redis Cluster the records share their token key's slot, with and
// without a hash tag: the script touching both is not refused (CROSSSLOT).
func TestCallRecordsInCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a Redis Cluster: the full run only (TestCallRecords checks the keys' names)")
	}
	cl := redistest.StartCluster(t, 1, 0)
	c := cl.NewClient(t)
	ctx := context.Background()
	g := newGuard(t, c)
	require.NoError(t, g.Do(ctx, "r", 3, func(_ context.Context, b *redisfence.Batch) error {
		b.Set("{r}:v", "x")
		return nil
	}))
	// A token key without a hash tag, and so no data key in its slot:
	// Admit alone.
	plain := newGuard(t, c, redisfence.WithTokenKey(func(r string) string { return "fences:" + r }))
	require.NoError(t, plain.Admit(ctx, "r", 3))
	node := redis.NewClient(&redis.Options{Addr: cl.Addrs()[0], MaxRetries: -1})
	defer node.Close()
	for pattern, tokenKey := range map[string]string{"{r}:fence:call:*": "{r}:fence", "{fences:r}:call:*": "fences:r"} {
		keys := recordKeys(t, node, pattern)
		require.NotEmpty(t, keys, pattern)
		want, err := c.ClusterKeySlot(ctx, tokenKey).Result()
		require.NoError(t, err)
		for _, k := range keys {
			slot, err := c.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			assert.Equal(t, want, slot, "%s is in the slot of %s", k, tokenKey)
		}
	}
}

// proxied returns a Guard whose client, with options o (go-redis's
// defaults for the zero Options: MaxRetries 3), reaches srv through a fault
// proxy, with a first write made through it so that the connection is open
// and the script cached.
func proxied(t *testing.T, srv *redistest.Server, o redis.Options, opts ...redisfence.Option) (*redisfence.Guard, *faultproxy.Proxy) {
	p, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	o.Addr = p.Addr()
	c := redis.NewClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	g := newGuard(t, c, opts...)
	require.NoError(t, g.Admit(context.Background(), "warm", 1))
	return g, p
}

// landed runs g.Do(ctx, "r", token, set "{r}:v" to v) with its answer held
// by p, and returns once the write has landed, with the channel Do's result
// comes on.
func landed(t *testing.T, ctx context.Context, g *redisfence.Guard, p *faultproxy.Proxy, c *redis.Client, token fencing.Token, v string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- g.Do(ctx, "r", token, func(_ context.Context, b *redisfence.Batch) error {
			b.Set("{r}:v", v)
			p.HoldReplies()
			return nil
		})
	}()
	for c.Get(ctx, "{r}:v").Val() != v {
		select {
		case err := <-done:
			t.Fatalf("Do returned before its write landed: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return done
}

// A retried script applies nothing twice: the same holder's next write
// (equal tokens pass), made while the first one's answer was lost, stays,
// and the retry reports the first write as applied.
func TestRetryAppliesNothingTwice(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, p := proxied(t, srv, redis.Options{})
	defer p.Heal()
	done := landed(t, ctx, g, p, c, 5, "first")
	require.NoError(t, newGuard(t, c).Do(ctx, "r", 5, func(_ context.Context, b *redisfence.Batch) error {
		b.Set("{r}:v", "second")
		return nil
	}))
	p.Drop()
	p.Heal()
	require.NoError(t, <-done, "the retry finds the first run's record")
	assert.Equal(t, "second", c.Get(ctx, "{r}:v").Val(), "the retry did not apply the first write again")
}

// A stale answer that comes when the record of an earlier run may have
// expired is not trusted: here the record did expire, the retry finds
// token 6, and Do says the outcome is unknown (and counts it so), not
// stale.
func TestLateStaleAnswerIsUnknown(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := fencetest.NewRecorder(t)
	const window = 2 * time.Second
	// A read timeout beyond the test's waits: the answer that ends Do is
	// the retry's after the Drop, not a timeout.
	g, p := proxied(t, srv, redis.Options{ReadTimeout: 30 * time.Second},
		redisfence.WithReplayWindow(window), redisfence.WithTelemetry(rec.Telemetry(false)))
	defer p.Heal()
	done := landed(t, ctx, g, p, c, 5, "by 5")
	records := recordKeys(t, c, "{r}:fence:call:*")
	require.Len(t, records, 1)
	require.NoError(t, newGuard(t, c).Admit(ctx, "r", 6))
	for c.Exists(ctx, records[0]).Val() == 1 {
		time.Sleep(50 * time.Millisecond) // the record expires with the window
	}
	p.Drop()
	p.Heal()
	err := <-done
	require.ErrorIs(t, err, fencing.ErrOutcomeUnknown)
	require.NotErrorIs(t, err, fencing.ErrStaleToken)
	require.ErrorContains(t, err, "token 5 is stale now (6 was admitted)", "the retry's stale answer, not a timeout")
	t.Log(err)
	rec.Expect(t, "redis", fencetest.Observed{Decision: fencing.DecisionAccepted, Token: 1},
		fencetest.Observed{Decision: fencing.DecisionUnknown, Token: 5})
}
