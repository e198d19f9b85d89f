package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/redistest"
)

// driverLocker returns a Locker over its own client of addr and its driver,
// for tests that read the driver's counters.
func driverLocker(t testing.TB, c Client, cfg Config, opts ...backend.Option) (*backend.Locker, *redisDriver) {
	t.Helper()
	d, err := newDriver(c, cfg, nil)
	require.NoError(t, err)
	l, err := backend.New(d, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l, d
}

// cmdLog records the names of the commands a client sends.
type cmdLog struct {
	mu   sync.Mutex
	cmds []string
}

func (r *cmdLog) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (r *cmdLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		r.mu.Lock()
		r.cmds = append(r.cmds, strings.ToLower(cmd.Name()))
		r.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (r *cmdLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}
func (r *cmdLog) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cmds
	r.cmds = nil
	return c
}

func TestEscapeName(t *testing.T) {
	names := []string{"a", "a}", "{a}", "a:token", "a}:token", "a%7D", "%", "x{y}z", "a/b", "ü"}
	seen := map[string]string{}
	for _, n := range names {
		k := keysOf("p", n)
		for _, key := range []string{k.lock, k.counter, k.queue, k.expiry} {
			if other, dup := seen[key]; dup {
				t.Fatalf("names %q and %q both produce key %q", n, other, key)
			}
			seen[key] = n
			// The hash tag is the whole escaped name: the first '{' and the
			// first '}' after it are ours.
			open := strings.IndexByte(key, '{')
			end := open + strings.IndexByte(key[open:], '}')
			require.Equal(t, escapeName(n), key[open+1:end], "hash tag of %q", key)
			require.True(t, strings.HasPrefix(key, "p:{"), key)
		}
	}
	require.Equal(t, "fencelock:{a%7B%7D%3A%25}", LockKey("", "a{}:%"))

	_, err := New(newClient(t, srv.Addr()), Config{})
	require.NoError(t, err)
	_, err = New(newClient(t, srv.Addr()), Config{Prefix: "a{b"})
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	_, err = New(nil, Config{})
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	_, err = New(newClient(t, srv.Addr()), Config{}, backend.WithTTL(1500*time.Microsecond+100*time.Millisecond))
	require.ErrorIs(t, err, backend.ErrInvalidOption, "sub-millisecond TTL")

	// End to end: names that differ only by escaped characters are
	// different locks.
	prefix := testPrefix(t)
	l := locker(t, srv.Addr(), Config{Prefix: prefix})
	var held []*backend.Lease
	for _, n := range names {
		ls, err := l.TryAcquire(tctx(t, 5*time.Second), n)
		require.NoError(t, err, n)
		held = append(held, ls)
	}
	for _, ls := range held {
		release(t, ls)
	}
}

// TestNoScript: EVALSHA falls back to EVAL after SCRIPT FLUSH and after a
// server restart empties the script cache, for acquire, refresh and release.
func TestNoScript(t *testing.T) {
	s := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	log := &cmdLog{}
	c.AddHook(log)
	l, _ := driverLocker(t, c, Config{})
	admin := s.NewClient(t)
	ctx := tctx(t, 20*time.Second)

	cycle := func(what string) fencing.Token {
		ls, err := l.TryAcquire(ctx, "n")
		require.NoError(t, err, what)
		require.NoError(t, ls.Refresh(ctx), what)
		release(t, ls)
		return ls.Token()
	}
	cycle("first use")
	log.take()
	t0 := cycle("cached")
	require.Equal(t, []string{"evalsha", "evalsha", "evalsha"}, log.take(), "with the scripts cached, one EVALSHA per operation")

	require.NoError(t, admin.ScriptFlush(ctx).Err())
	t1 := cycle("after SCRIPT FLUSH")
	require.Equal(t, []string{"evalsha", "eval", "evalsha", "eval", "evalsha", "eval"}, log.take(),
		"after SCRIPT FLUSH every script is run with EVAL after a NOSCRIPT")

	require.NoError(t, s.Restart())
	var t3 fencing.Token
	require.Eventually(t, func() bool {
		ls, err := l.TryAcquire(ctx, "n")
		if err != nil {
			return false // the client reconnects
		}
		release(t, ls)
		t3 = ls.Token()
		return true
	}, 10*time.Second, 20*time.Millisecond)
	cmds := log.take()
	require.Contains(t, cmds, "eval", "after a restart the scripts are loaded again")
	// Without persistence the counter was lost with the restart; the
	// clock floor (the default) keeps tokens growing (TestRestartTokens).
	t.Logf("token before restart %d, after %d", t1, t3)
	assert.Greater(t, t1, t0, "SCRIPT FLUSH empties the script cache, not the counter")
	assert.Greater(t, t3, t1)
}

// TestUncontendedServerCalls counts the commands the scripts run on the
// server for one acquire+release of a free lock nobody waits for: with an
// empty queue the scripts skip the queue's bookkeeping (acquire: end mark,
// lock key, queue head, the lock-delay marker (PTTL), INCR, TIME for the
// clock floor, SET (and a second SET of the counter when the clock is
// ahead of it, as it is after the first grant); release: GET, DEL, queue
// head).
func TestUncontendedServerCalls(t *testing.T) {
	s := redistest.Start(t)
	admin := s.NewClient(t)
	l, _ := driverLocker(t, s.NewClient(t), Config{})
	ctx := tctx(t, 20*time.Second)
	cycle := func() {
		ls, err := l.Acquire(ctx, "n")
		require.NoError(t, err)
		release(t, ls)
	}
	cycle() // loads the scripts
	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	const n = 10
	for range n {
		cycle()
	}
	calls := map[string]int{}
	for _, line := range strings.Split(admin.Info(ctx, "commandstats").Val(), "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok || name == "evalsha" || strings.HasPrefix(name, "config") || name == "info" {
			continue
		}
		count, _, _ := strings.Cut(rest, ",")
		c, err := strconv.Atoi(count)
		require.NoError(t, err, line)
		calls[name] += c
	}
	t.Logf("server calls in %d acquire+release cycles: %v", n, calls)
	// The counter is read (GET), not incremented (INCR): it is behind the
	// clock, and raised to it.
	assert.Equal(t, map[string]int{"get": 4 * n, "zrange": 2 * n, "pttl": n, "time": n, "set": 2 * n, "del": n}, calls)
}

// TestLossSignalled: a lock key deleted or expired under its holder fires the
// holder's loss signal at its next renewal, with ErrDeleted, and the
// refresh never re-creates the key (redsync's WithSetNXOnExtend).
func TestLossSignalled(t *testing.T) {
	prefix := testPrefix(t)
	admin := newClient(t, srv.Addr())
	l := locker(t, srv.Addr(), Config{Prefix: prefix})
	const ttl = 900 * time.Millisecond
	for _, how := range []string{"deleted", "expired"} {
		t.Run(how, func(t *testing.T) {
			name := "loss-" + how
			ls, err := l.TryAcquire(tctx(t, 5*time.Second), name, backend.WithTTL(ttl))
			require.NoError(t, err)
			key := LockKey(prefix, name)
			start := time.Now()
			if how == "deleted" {
				require.NoError(t, admin.Del(tctx(t, 5*time.Second), key).Err())
			} else {
				require.NoError(t, admin.PExpire(tctx(t, 5*time.Second), key, time.Millisecond).Err())
			}
			select {
			case <-ls.Done():
			case <-time.After(ttl + 3*time.Second):
				t.Fatal("no loss signal")
			}
			require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
			// Redis keeps no trace of why a key is gone: both are
			// ErrDeleted (see the package documentation).
			require.ErrorIs(t, ls.Err(), backend.ErrDeleted, "the loss names its cause")
			t.Logf("loss signalled after %v", time.Since(start))
			n, err := admin.Exists(tctx(t, 5*time.Second), key).Result()
			require.NoError(t, err)
			require.Zero(t, n, "the lost key must not be re-created")
			require.ErrorIs(t, ls.Release(tctx(t, 5*time.Second)), backend.ErrLeaseLost)
		})
	}
}

// TestLostNotice: a lock key deleted with nothing published (a raw DEL, a
// crashed holder, or a notice lost on a broken pub/sub connection) still
// ends in a grant, through the waiter's fallback timer at the lock key's
// remaining TTL.
func TestLostNotice(t *testing.T) {
	prefix := testPrefix(t)
	admin := newClient(t, srv.Addr())
	ca := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	la, _ := driverLocker(t, ca, Config{Prefix: prefix})
	lb, db := driverLocker(t, newClient(t, srv.Addr()), Config{Prefix: prefix})
	ls, err := la.TryAcquire(tctx(t, 5*time.Second), "n", backend.WithTTL(time.Second), backend.WithAutoRenew(false))
	require.NoError(t, err)
	chB := goAcquire(tctx(t, 20*time.Second), lb, "n")
	requireBlocked(t, chB, 200*time.Millisecond)
	require.NoError(t, ca.Close()) // the holder crashes: it will not release
	start := time.Now()
	require.NoError(t, admin.Del(tctx(t, 5*time.Second), LockKey(prefix, "n")).Err())
	r := waitAcquired(t, chB, 5*time.Second)
	require.NoError(t, r.Err)
	require.Greater(t, r.Lease.Token(), ls.Token())
	require.Zero(t, db.wakeups.Load(), "nothing was published: the grant came from the fallback timer")
	t.Logf("granted %v after the silent delete (lock TTL 1s)", time.Since(start))
	release(t, r.Lease)
}

// TestQueue: waiters are granted in arrival order, each release wakes only
// the next waiter (one wake-up per grant, whatever the number of waiters),
// and a releaser that comes straight back joins the tail.
func TestQueue(t *testing.T) {
	prefix := testPrefix(t)
	lh, dh := driverLocker(t, newClient(t, srv.Addr()), Config{Prefix: prefix})
	ctx := tctx(t, 60*time.Second)
	held, err := lh.TryAcquire(ctx, "n")
	require.NoError(t, err)

	const waiters = 5
	drivers := []*redisDriver{dh}
	var chans []<-chan acquired
	for i := range waiters {
		l, d := driverLocker(t, newClient(t, srv.Addr()), Config{Prefix: prefix})
		drivers = append(drivers, d)
		chans = append(chans, goAcquire(ctx, l, "n"))
		require.Eventually(t, func() bool {
			st, err := lh.Status(ctx, "n")
			return err == nil && len(st.Waiters) == i+1
		}, 10*time.Second, 5*time.Millisecond, "waiter %d queued", i)
	}
	wakeups := func() (n int64) {
		for _, d := range drivers {
			n += d.wakeups.Load()
		}
		return n
	}
	require.Zero(t, wakeups())

	release(t, held) // hands the lock to waiter 0
	again := goAcquire(ctx, lh, "n")
	chans = append(chans, again)
	require.Eventually(t, func() bool {
		st, err := lh.Status(ctx, "n")
		return err == nil && len(st.Waiters) == waiters
	}, 10*time.Second, 5*time.Millisecond, "the releaser queued behind waiters 1 to %d", waiters-1)
	prev := held.Token()
	for i := range chans {
		select {
		case r := <-merge(chans[i : i+1]):
			require.NoError(t, r.Err, "waiter %d", i)
			assert.Greater(t, r.Lease.Token(), prev)
			prev = r.Lease.Token()
			for j := i + 1; j < len(chans); j++ {
				requireBlocked(t, chans[j], 0)
			}
			release(t, r.Lease)
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d (in arrival order) not granted; the releaser came back as waiter %d", i, waiters)
		}
	}
	// Each release named the next waiter only (the releaser's comeback
	// queued behind the others, so it was woken too) and granted it the
	// lock: no waiter ran its acquire script again after the two that
	// subscribed and queued it.
	require.Eventually(t, func() bool { return wakeups() == int64(len(chans)) }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, int64(len(chans)), wakeups(), "wake-ups for %d grants", len(chans))
	require.Equal(t, int64(2*waiters), totalAttempts(drivers[1:]), "acquire scripts of the %d waiters", waiters)
	require.Equal(t, int64(1+2), dh.attempts.Load(), "acquire scripts of the releaser (TryAcquire, then its wait)")
}

// queueSlowWaiter queues, by hand, a waiter "slow" that is slow to take its
// turn: an entry with ttl to live and no subscription, whose owner id has no
// TTL, so that nobody can grant it the lock.
func queueSlowWaiter(ctx context.Context, t *testing.T, raw *goredis.Client, k keys, ttl time.Duration) {
	t.Helper()
	require.NoError(t, raw.ZAdd(ctx, k.queue, goredis.Z{Score: 1, Member: "slow"}).Err())
	require.NoError(t, raw.ZAdd(ctx, k.expiry, goredis.Z{Score: float64(serverMillis(t, raw) + ttl.Milliseconds()), Member: "slow"}).Err())
}

// TestPromisedToWaiter: between a release and the next waiter's attempt,
// the free lock is the waiter's: a TryAcquire is refused and an Acquire
// queues behind it.
func TestPromisedToWaiter(t *testing.T) {
	prefix := testPrefix(t)
	l := locker(t, srv.Addr(), Config{Prefix: prefix})
	ctx := tctx(t, 20*time.Second)
	k := keysOf(prefix, "n")
	raw := newClient(t, srv.Addr())
	queueSlowWaiter(ctx, t, raw, k, 2*time.Second)
	_, err := l.TryAcquire(ctx, "n")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.ErrorContains(t, err, "promised to an earlier waiter")
	// Its entry lapses after 2s; the Acquire queued behind it is then
	// woken (by its own renewal) and granted.
	start := time.Now()
	ls, err := l.Acquire(ctx, "n", backend.WithTTL(time.Second))
	require.NoError(t, err)
	t.Logf("granted %v after the slow waiter's entry (2s) lapsed", time.Since(start))
	release(t, ls)
	n, err := raw.Exists(ctx, k.queue, k.expiry).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the queue keys go when the queue is empty")
}

func serverMillis(t testing.TB, c *goredis.Client) int64 {
	tm, err := c.Time(tctx(t, 5*time.Second)).Result()
	require.NoError(t, err)
	return tm.UnixMilli()
}

type indexed struct {
	acquired
	i int
}

func merge(chans []<-chan acquired) <-chan indexed {
	out := make(chan indexed, len(chans))
	for i, ch := range chans {
		go func() { out <- indexed{<-ch, i} }()
	}
	return out
}

func totalAttempts(ds []*redisDriver) (n int64) {
	for _, d := range ds {
		n += d.attempts.Load()
	}
	return n
}

// TestNothingLeftBehind: a failed TryAcquire and a cancelled wait leave no
// key; a Locker keeps one subscription (its wake channel) until it closes.
func TestNothingLeftBehind(t *testing.T) {
	prefix := testPrefix(t)
	admin := newClient(t, srv.Addr())
	la := locker(t, srv.Addr(), Config{Prefix: prefix})
	lb, db := driverLocker(t, newClient(t, srv.Addr()), Config{Prefix: prefix})
	ctx := tctx(t, 10*time.Second)
	held, err := la.TryAcquire(ctx, "n")
	require.NoError(t, err)
	keysNow := func() []string {
		ks, err := admin.Keys(ctx, prefix+":*").Result()
		require.NoError(t, err)
		return ks
	}
	before := keysNow()
	_, err = lb.TryAcquire(ctx, "n")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.ElementsMatch(t, before, keysNow())

	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = lb.Acquire(wctx, "n")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ElementsMatch(t, before, keysNow())
	subscribers := func() int64 {
		ch := wakeChannel(prefix, db.id)
		m, err := admin.PubSubNumSub(ctx, ch).Result()
		require.NoError(t, err)
		return m[ch]
	}
	require.Equal(t, int64(1), subscribers(), "the Locker's wake channel")
	release(t, held)
	require.NoError(t, lb.Close())
	require.Eventually(t, func() bool { return subscribers() == 0 }, 5*time.Second, 5*time.Millisecond,
		"the closed Locker's subscription")
	require.Empty(t, filter(keysNow(), func(k string) bool { return !strings.HasSuffix(k, ":token") }),
		"only the token counter outlives the lock")
}

func filter(ks []string, keep func(string) bool) []string {
	var out []string
	for _, k := range ks {
		if keep(k) {
			out = append(out, k)
		}
	}
	return out
}

// TestClosedClientWaiter: a waiter whose client is closed under it fails at
// once (it would otherwise wait for the holder's whole TTL).
func TestClosedClientWaiter(t *testing.T) {
	prefix := testPrefix(t)
	la := locker(t, srv.Addr(), Config{Prefix: prefix})
	held, err := la.TryAcquire(tctx(t, 5*time.Second), "n", backend.WithTTL(time.Minute))
	require.NoError(t, err)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	lb, err := New(c, Config{})
	require.NoError(t, err)
	lb2, err := New(c, Config{Prefix: prefix})
	require.NoError(t, err)
	_ = lb
	ch := goAcquire(tctx(t, 30*time.Second), lb2, "n")
	requireBlocked(t, ch, 200*time.Millisecond)
	require.NoError(t, c.Close())
	r := waitAcquired(t, ch, 5*time.Second)
	require.Error(t, r.Err)
	require.True(t, errors.Is(r.Err, goredis.ErrClosed), "%v", r.Err)
	_ = lb.Close()
	_ = lb2.Close()
	release(t, held)
}

// An attempt whose fate was unknown when its acquisition was released (its
// request held in the network, say) takes nothing if it lands afterwards:
// the release leaves an end mark that the acquire script honours.
func TestLateAttemptTakesNothing(t *testing.T) {
	prefix := testPrefix(t)
	raw := newClient(t, srv.Addr())
	_, d := driverLocker(t, newClient(t, srv.Addr()), Config{Prefix: prefix})
	ctx := tctx(t, 10*time.Second)
	dl, _, err := d.NewLease(ctx, driver.Request{Name: "n", TTL: 5 * time.Second, Lost: func(error) {}})
	require.NoError(t, err)
	l := dl.(*lease)

	// An attempt that got no reply: whether it applied is unknown.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Lock(gone, false)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, l.Release(ctx, false))
	k := keysOf(prefix, "n")
	mark, err := raw.PTTL(ctx, k.ended+l.owner).Result()
	require.NoError(t, err)
	assert.Greater(t, mark, 50*time.Second, "end mark lifetime: max(10 TTLs, 1m)")

	// The attempt lands now, as a waiter would join: it takes nothing.
	_, err = d.acquire(ctx, l, queueJoin)
	require.ErrorIs(t, err, backend.ErrLeaseLost)
	n, err := raw.Exists(ctx, k.lock, k.queue, k.expiry).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "lock key or queue entry left by the late attempt")
	ls, err := locker(t, srv.Addr(), Config{Prefix: prefix}).TryAcquire(ctx, "n")
	require.NoError(t, err, "the lock is free")
	release(t, ls)
}

// TestWaiterServerGone: a waiter queued behind a holder whose server then
// dies reports, when its context ends, that the backend stopped answering
// (ErrUnavailable), not that someone else holds the lock (ErrNotAcquired):
// a job that skips its work when the lock is held must not skip it
// silently when Redis is down.
func TestWaiterServerGone(t *testing.T) {
	s := redistest.Start(t)
	prefix := testPrefix(t)
	la := locker(t, s.Addr(), Config{Prefix: prefix})
	lb := locker(t, s.Addr(), Config{Prefix: prefix})
	locktest.RequireUnavailableWhenServerGone(t, la, lb, "n", s.Kill, backend.WithTTL(time.Minute))
}

// TestServerFull: a server out of memory (maxmemory) or of client slots
// (maxclients) cannot take the request now: Acquire reports ErrUnavailable,
// not a held lock or a bare error.
func TestServerFull(t *testing.T) {
	s := redistest.Start(t)
	admin := s.NewClient(t)
	ctx := tctx(t, 10*time.Second)

	l := locker(t, s.Addr(), Config{Prefix: testPrefix(t)})
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "1").Err())
	_, err := l.TryAcquire(ctx, "n")
	require.ErrorIs(t, err, backend.ErrUnavailable, "out of memory")
	require.NotErrorIs(t, err, backend.ErrNotAcquired)
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())

	require.NoError(t, admin.ConfigSet(ctx, "maxclients", "1").Err())
	full := locker(t, s.Addr(), Config{Prefix: testPrefix(t)})
	_, err = full.TryAcquire(ctx, "n")
	require.ErrorIs(t, err, backend.ErrUnavailable, "no client slot")
	require.NotErrorIs(t, err, backend.ErrNotAcquired)
}
