package redis

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/redistest"
)

// waitLog counts the WAITs a client sends alone and in pipelines.
type waitLog struct {
	mu           sync.Mutex
	alone, piped int
}

func (w *waitLog) count(n *int, cmds ...goredis.Cmder) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range cmds {
		if strings.EqualFold(c.Name(), "wait") {
			*n++
		}
	}
}

// take returns the counts since the last take.
func (w *waitLog) take() (alone, piped int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	alone, piped = w.alone, w.piped
	w.alone, w.piped = 0, 0
	return alone, piped
}

func (w *waitLog) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (w *waitLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		w.count(&w.alone, cmd)
		return next(ctx, cmd)
	}
}
func (w *waitLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		w.count(&w.piped, cmds...)
		return next(ctx, cmds)
	}
}

// TestWaitBounded: the WAIT after a grant waits at most half the
// acquisition's TTL and less than what is left of its context, whatever
// WaitTimeout says, so that a grant no replica acknowledges fails as not
// replicated (ErrUnavailable, ErrNotReplicated), not as a lease lost to
// its local deadline, nor as a context that ended without an answer.
func TestWaitBounded(t *testing.T) {
	t.Parallel()
	p := redistest.Start(t)
	r := redistest.StartReplica(t, p)
	l, _ := driverLocker(t, p.NewClient(t), Config{WaitReplicas: 1, WaitTimeout: time.Minute})
	r.Kill()

	t.Run("TTL", func(t *testing.T) {
		ctx := tctx(t, 30*time.Second)
		_, err := l.TryAcquire(ctx, "ttl", backend.WithTTL(2*time.Second))
		require.ErrorIs(t, err, ErrNotReplicated)
		require.ErrorIs(t, err, backend.ErrUnavailable)
		require.NotErrorIs(t, err, backend.ErrLeaseLost)
		assert.ErrorContains(t, err, "within 1s", "half the TTL")
	})
	t.Run("Context", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := l.TryAcquire(ctx, "ctx", backend.WithTTL(time.Minute))
		require.ErrorIs(t, err, ErrNotReplicated, "WAIT answered before the context ended")
		require.ErrorIs(t, err, backend.ErrUnavailable)
		require.NoError(t, ctx.Err())
	})
}

// TestReplicasShort: while fewer replicas than WaitReplicas acknowledge,
// a holder keeps its lock (renewals wait for no replica); a TryAcquire of
// a held lock answers ErrNotAcquired, without a WAIT once its Locker has
// seen a WAIT come back short; a grant fails with ErrUnavailable and
// ErrNotReplicated (Acquire too, long before its context ends), and its
// key is deleted again; once the replica is back grants succeed, and
// WAIT goes in the grant's pipeline again.
func TestReplicasShort(t *testing.T) {
	t.Parallel()
	p := redistest.Start(t)
	r := redistest.StartReplica(t, p)
	cfg := Config{WaitReplicas: 1, WaitTimeout: 2 * time.Second}
	ttl := backend.WithTTL(6 * time.Second)
	la, _ := driverLocker(t, p.NewClient(t), cfg, ttl)
	cb := p.NewClient(t)
	waits := &waitLog{}
	cb.AddHook(waits)
	lb, db := driverLocker(t, cb, cfg, ttl)
	admin := p.NewClient(t)
	ctx := tctx(t, 2*time.Minute)

	a, err := la.TryAcquire(ctx, "held")
	require.NoError(t, err)
	r.Kill()

	// The first refusal's WAIT (in its pipeline) finds the replica gone;
	// the next ones send none.
	for i := range 3 {
		_, err := lb.TryAcquire(ctx, "held")
		require.ErrorIs(t, err, backend.ErrNotAcquired, "try %d", i)
		alone, piped := waits.take()
		if i == 0 {
			require.True(t, db.replicasShort(""), "the WAIT came back short")
			require.Equal(t, [2]int{0, 1}, [2]int{alone, piped}, "WAIT in the pipeline")
		} else {
			require.Zero(t, alone+piped, "try %d: a refusal waits for no replica", i)
		}
	}

	for _, try := range []bool{true, false} {
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		var err error
		if try {
			_, err = lb.TryAcquire(actx, "free")
		} else {
			_, err = lb.Acquire(actx, "free")
		}
		require.ErrorIs(t, err, ErrNotReplicated, "TryAcquire %v", try)
		require.ErrorIs(t, err, backend.ErrUnavailable)
		require.NotErrorIs(t, err, backend.ErrNotAcquired)
		require.ErrorContains(t, err, "0 of 1 replicas")
		require.NoError(t, actx.Err(), "failed before its context ended")
		cancel()
		alone, piped := waits.take()
		require.Equal(t, [2]int{1, 0}, [2]int{alone, piped}, "TryAcquire %v: WAIT after the grant only", try)
		require.Eventually(t, func() bool {
			n, err := admin.Exists(ctx, LockKey("", "free")).Result()
			return err == nil && n == 0
		}, 10*time.Second, 10*time.Millisecond, "the unreplicated grant's key is deleted")
	}
	require.NoError(t, a.Err(), "the holder kept its lock")

	require.NoError(t, r.Restart())
	require.Eventually(t, func() bool {
		ls, err := lb.TryAcquire(ctx, "free")
		if err != nil {
			return false
		}
		release(t, ls)
		return true
	}, time.Minute, 50*time.Millisecond, "a grant once the replica is back")
	require.False(t, db.replicasShort(""), "a replicated grant clears the mark")
	waits.take()
	ls, err := lb.TryAcquire(ctx, "free")
	require.NoError(t, err)
	release(t, ls)
	alone, piped := waits.take()
	require.Equal(t, [2]int{0, 1}, [2]int{alone, piped}, "WAIT in the grant's pipeline again")
	release(t, a)
}

// TestWakeupsFollowFailover: after a SENTINEL FAILOVER whose old primary
// is still up (here frozen, so that it can tell nobody anything), the
// Locker's pub/sub subscription, which go-redis leaves on the old primary,
// is found deaf (a waiter's renewal finds a grant no message announced;
// the hub's ping does not come back) and moved to the new primary: a
// release's message reaches the waiter again.
func TestWakeupsFollowFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinels(t, 3)
	ctx := tctx(t, 2*time.Minute)
	opt, cfg, err := ParseFailoverURL(sentinelURL(s, "prefix=follow"))
	require.NoError(t, err)
	opt.ContextTimeoutEnabled = true
	c := goredis.NewFailoverClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	l, d := driverLocker(t, c, cfg, backend.WithTTL(2*time.Second))

	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	var grants sync.Map // time of each grant, by worker
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				ls, err := l.Acquire(wctx, "n")
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				grants.Store(w, time.Now())
				time.Sleep(20 * time.Millisecond)
				_ = ls.Release(ctx)
			}
		}()
	}
	require.Eventually(t, func() bool { return d.wakeups.Load() > 0 }, time.Minute, 10*time.Millisecond,
		"handoffs by message before the failover")
	old, err := s.Master(ctx)
	require.NoError(t, err)
	_, err = s.Failover(ctx)
	require.NoError(t, err)
	require.NoError(t, old.Pause())
	defer func() { _ = old.Resume() }()
	// A grant after the pause (on the new primary) comes after whatever
	// the old primary sent before it.
	paused := time.Now()
	require.Eventually(t, func() bool {
		later := false
		grants.Range(func(_, v any) bool {
			later = later || v.(time.Time).After(paused)
			return !later
		})
		return later
	}, time.Minute, 10*time.Millisecond, "grants on the new primary")
	w0 := d.wakeups.Load()
	require.Eventually(t, func() bool { return d.wakeups.Load() > w0 }, time.Minute, 10*time.Millisecond,
		"a release's message reaches a waiter from the new primary")
	assert.Positive(t, d.hub.renewals.Load(), "the subscription was moved")
}
