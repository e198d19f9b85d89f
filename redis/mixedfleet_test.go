package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

// Mixed fleets fair both ways (Config.ForeignInterval, ForeignGap): once
// a foreign holder was seen on a lock, a release after an interval of
// handoffs among our waiters leaves the key free for a gap, so that a
// redsync or redislock client that retries gets it.

// TestForeignGap: a redislock holder is seen by our first waiter; with
// ForeignInterval 2s, our release soon after hands the lock to the next
// waiter, and its release 2s later leaves the key free for the gap, three
// times ForeignGap long (a foreign holder was seen within the last minute): a
// redislock Obtain (one try) gets it; the waiter woken for the gap gives
// up during it, and its release does not hand the key to the one behind
// it either, which takes it only after the gap. Our waiters were granted
// in their order, with growing tokens. Then, with the mark aged as if the
// last sighting were more than a minute ago, the next gap lasts ForeignGap.
func TestForeignGap(t *testing.T) {
	const (
		interval = 2 * time.Second
		gap      = 400 * time.Millisecond
		recent   = 3 * gap // the gap while a foreign holder was seen lately
	)
	prefix := testPrefix(t)
	k := keysOf(prefix, "n")
	admin := newClient(t, srv.Addr())
	rl := redislock.New(newClient(t, srv.Addr()))
	cfg := Config{Prefix: prefix, ForeignInterval: interval, ForeignGap: gap}
	la, lb, lc, ld := locker(t, srv.Addr(), cfg), locker(t, srv.Addr(), cfg), locker(t, srv.Addr(), cfg), locker(t, srv.Addr(), cfg)
	ctx := tctx(t, 30*time.Second)

	theirs, err := rl.Obtain(ctx, k.lock, 15*time.Second, nil)
	require.NoError(t, err)
	a := goAcquire(ctx, la, "n")
	waitQueued(t, la, "n", 1)
	b := goAcquire(ctx, lb, "n")
	waitQueued(t, la, "n", 2)
	cctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	c := goAcquire(cctx, lc, "n")
	waitQueued(t, la, "n", 3)
	d := goAcquire(ctx, ld, "n")
	waitQueued(t, la, "n", 4)
	require.Equal(t, int64(1), admin.Exists(ctx, k.foreign).Val(), "the foreign holder was seen")
	require.NoError(t, theirs.Release(ctx))
	ra := waitAcquired(t, a, 5*time.Second) // by polling
	require.NoError(t, ra.Err)

	release(t, ra.Lease) // within the interval: b, directly
	rb := waitAcquired(t, b, 5*time.Second)
	require.NoError(t, rb.Err)
	time.Sleep(interval) // since the key was last free: more than that
	requireBlocked(t, c, 20*time.Millisecond)

	releasing := time.Now()
	release(t, rb.Lease) // after the interval: a gap
	require.Equal(t, int64(0), admin.Exists(ctx, k.lock).Val(), "the key is left free")
	// More than ForeignGap left (a cold gap's whole length), whatever delays
	// the PTTL on a busy machine up to 2*gap.
	require.Greater(t, admin.PTTL(ctx, k.gap).Val(), gap, "a foreign holder was seen lately: the gap is three times ForeignGap")
	theirs, err = rl.Obtain(ctx, k.lock, 15*time.Second, nil)
	require.NoError(t, err, "a foreign client takes the key in the gap")
	requireBlocked(t, c, 50*time.Millisecond)
	require.NoError(t, theirs.Release(ctx))
	giveUp()
	rc := waitAcquired(t, c, 5*time.Second)
	require.ErrorIs(t, rc.Err, context.Canceled)
	if time.Since(releasing) < recent/2 {
		require.Equal(t, int64(0), admin.Exists(ctx, k.lock).Val(), "the key is still free: the gap lasts")
	}
	rd := waitAcquired(t, d, 5*time.Second)
	require.NoError(t, rd.Err)
	took := time.Since(releasing)
	// The gap key expires in the server recent after the release script
	// ran, which was after releasing: the waiter cannot have been granted
	// sooner (a little less, for the server's and our clocks' rounding).
	assert.GreaterOrEqual(t, took, recent-10*time.Millisecond, "granted during the gap")
	require.Less(t, ra.Lease.Token(), rb.Lease.Token())
	require.Less(t, rb.Lease.Token(), rd.Lease.Token())
	t.Logf("granted %v after the release that left the gap", took)

	// The mark lives 10 minutes from the last sighting: 8m59s left is a
	// sighting more than a minute ago.
	require.True(t, admin.PExpire(ctx, k.foreign, 8*time.Minute+59*time.Second).Val())
	e := goAcquire(ctx, la, "n")
	waitQueued(t, la, "n", 1)
	time.Sleep(interval) // since the gap ended, when the key was last free
	release(t, rd.Lease)
	left := admin.PTTL(ctx, k.gap).Val()
	require.Greater(t, left, time.Duration(0), "a gap")
	require.LessOrEqual(t, left, gap, "no foreign holder seen lately: the gap is ForeignGap")
	re := waitAcquired(t, e, 5*time.Second)
	require.NoError(t, re.Err)
	require.Less(t, rd.Lease.Token(), re.Lease.Token())
	release(t, re.Lease)
}

// TestNoGapWithoutForeign: a fencelock-only fleet (three Lockers taking the
// lock back to back) never marks the lock, so no release leaves a gap:
// every waiter is granted by its predecessor's release, one acquire script
// per acquisition once subscribed, as before.
func TestNoGapWithoutForeign(t *testing.T) {
	prefix := testPrefix(t)
	k := keysOf(prefix, "n")
	admin := newClient(t, srv.Addr())
	var ls []*backend.Locker
	var ds []*redisDriver
	for range 3 {
		l, d := driverLocker(t, newClient(t, srv.Addr()), Config{Prefix: prefix})
		ls, ds = append(ls, l), append(ds, d)
	}
	ctx, stop := context.WithCancel(tctx(t, 30*time.Second))
	defer stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var grants int
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				lease, err := l.Acquire(ctx, "n")
				if err != nil {
					return
				}
				time.Sleep(time.Millisecond)
				assert.NoError(t, lease.Release(context.Background()))
				mu.Lock()
				grants++
				mu.Unlock()
			}
		}()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return grants >= 300
	}, 20*time.Second, 5*time.Millisecond)
	stop()
	wg.Wait()
	require.Equal(t, int64(0), admin.Exists(ctx, k.foreign, k.gap).Val(), "no foreign holder seen, no gap")
	// Each Locker's first wait takes two scripts (before and after its
	// subscription), each acquisition one more for a cancelled last wait.
	require.LessOrEqual(t, totalAttempts(ds), int64(grants+2*len(ls)), "acquire scripts for %d grants", grants)
}

// fleetHold is how long every holder of the mixed-fleet tests holds.
const fleetHold = 20 * time.Millisecond

// fleetForeignBound is the longest a foreign client may wait for the lock
// in a mixed fleet with gaps (the defaults). A gap comes at the first
// release of ours at least DefaultForeignInterval (700ms) after the key
// was last free, so within 700ms and one hold of ours (fleetHold, 20ms)
// of a foreign client's first try; a foreign holder was seen within the
// last minute, so the gap lasts three times DefaultForeignGap (900ms). A
// foreign client retries at most 250ms apart (redsync's default delay;
// redislock's here, 100ms): the first of the two children to retry in the
// gap gets the key within 250ms; the other, whose retries fail only while
// the first holds the key (20ms of every 70ms or so: it takes the key
// again after its 50ms pause), tries at least three times more before the
// gap ends. So both are served by the end of the gap, 700 + 20 + 900ms =
// 1.62s after they began to wait (about 1s expected: within 250ms of the
// gap's start for the first, a retry or two later for the other). The
// bound adds 0.68s for a busy 2-core machine (the children's and our
// goroutines descheduled, -race, scripts/test --under-load): a client that
// missed a whole gap would wait for the next one, 700 + 20ms after it, at
// least 2.34s in all.
const fleetForeignBound = 2300 * time.Millisecond

// fleetRounds is how many times each foreign child of TestMixedFleetFair
// obtains the lock: a child takes it again and again within a gap (every
// 70ms or so), so 30 rounds span several gaps.
const fleetRounds = 30

// fleetRun is what runMixedFleet measured.
type fleetRun struct {
	waits  []time.Duration // the foreign children's obtains
	grants int             // ours while the children ran
	took   time.Duration   // how long the children ran
}

// runMixedFleet runs two fencelock Lockers (each with its own client,
// with cfg) that take lock name back to back, holding fleetHold, so that
// our queue is never empty, beside two foreign children (impl) that each
// obtain it rounds times with their library's retries, hold fleetHold and
// pause 50ms. Our Lockers stop when both children are done or after
// limit. Each of our holds checks that the key holds its value, and that
// its token is above every earlier one.
func runMixedFleet(t *testing.T, impl string, cfg Config, rounds int, limit time.Duration) fleetRun {
	name := "n"
	key := LockKey(cfg.Prefix, name)
	admin := newClient(t, srv.Addr())
	kids := []*child{startChild(t, impl, key), startChild(t, impl, key)}
	ctx, stop := context.WithCancel(tctx(t, 2*time.Minute))
	var mu sync.Mutex
	var last fencing.Token
	var run fleetRun
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }() // before the cleanups close the clients
	for range 2 {
		l := locker(t, srv.Addr(), cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			hold(ctx, t, l, admin, name, key, &mu, &last, &run.grants)
		}()
	}
	start := time.Now()
	for _, k := range kids {
		k.send(fmt.Sprintf("rounds %d %d 50", rounds, fleetHold.Milliseconds()))
	}
	type result struct {
		waits []time.Duration
		err   error
	}
	results := make(chan result, len(kids))
	for _, k := range kids {
		go func() {
			var r result
			for line := range k.lines {
				if line == "done" {
					results <- r
					return
				}
				f := strings.Fields(line)
				ns, err := strconv.ParseInt(f[len(f)-1], 10, 64)
				if f[0] != "took" || err != nil {
					r.err = fmt.Errorf("the foreign child said %q", line)
					break
				}
				r.waits = append(r.waits, time.Duration(ns))
			}
			if r.err == nil {
				r.err = fmt.Errorf("the foreign child exited")
			}
			results <- r
		}()
	}
	deadline := time.After(limit)
	for got := 0; got < len(kids); {
		select {
		case r := <-results:
			require.NoError(t, r.err)
			run.waits = append(run.waits, r.waits...)
			got++
		case <-deadline:
			stop() // the children get the key once our Lockers stop
			deadline = nil
		}
	}
	run.took = time.Since(start)
	stop()
	wg.Wait()
	return run
}

// hold takes lock name with l again and again until ctx ends, holding it
// fleetHold each time, and counts the grants in n; each hold checks that
// the key holds its value and that its token is above *last.
func hold(ctx context.Context, t *testing.T, l *backend.Locker, admin *goredis.Client, name, key string,
	mu *sync.Mutex, last *fencing.Token, n *int) {
	for {
		ls, err := l.Acquire(ctx, name)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("acquire: %v", err)
			}
			return
		}
		mu.Lock()
		assert.Greater(t, ls.Token(), *last, "tokens grow")
		*last = ls.Token()
		*n++
		mu.Unlock()
		time.Sleep(fleetHold)
		v, err := admin.Get(context.Background(), key).Result()
		assert.NoError(t, err)
		assert.True(t, strings.HasSuffix(v, ":"+ls.Token().String()), "the key holds %q while we hold %v", v, ls.Token())
		assert.NoError(t, ls.Release(context.Background()))
	}
}

// TestMixedFleetFair: two fencelock Lockers that keep our queue busy and
// two redislock or redsync clients in child processes, fleetRounds each,
// with the default gaps, on a lock where a foreign holder was seen first
// (a migration: "seen"), or with MixedFleet and no foreign holder seen:
// no foreign client waits more than fleetForeignBound, while ours keep
// being granted, in turn and with growing tokens. Then, with the lock
// marked and no foreign client left, our Lockers' grants per second on it
// are compared with an unmarked lock's, right after the foreign clients
// stopped and with the mark aged past a minute: the gaps' cost in a mixed
// fleet whose foreign clients are idle.
func TestMixedFleetFair(t *testing.T) {
	t.Parallel() // 40s, mostly waiting; its own prefixes and children
	for _, impl := range []string{"redislock", "redsync"} {
		for _, mode := range []string{"seen", "mixed_fleet"} {
			t.Run(impl+"/"+mode, func(t *testing.T) {
				cfg := Config{Prefix: testPrefix(t), MixedFleet: mode == "mixed_fleet"}
				if mode == "seen" {
					seeForeign(t, cfg, "n")
				}
				run := runMixedFleet(t, impl, cfg, fleetRounds, time.Minute)
				slices.Sort(run.waits)
				// The obtains that found the key free (in a gap) took a
				// round trip or two; the others waited for a gap.
				waited := slices.DeleteFunc(slices.Clone(run.waits), func(d time.Duration) bool { return d < 10*time.Millisecond })
				t.Logf("%s, %s: foreign waits median %v, max %v (%d of %d found the key free; the others: %v); ours: %d grants in %v",
					impl, mode, median(run.waits), run.waits[len(run.waits)-1], len(run.waits)-len(waited), len(run.waits), waited,
					run.grants, run.took.Round(time.Millisecond))
				require.Len(t, run.waits, 2*fleetRounds)
				assert.LessOrEqual(t, run.waits[len(run.waits)-1], fleetForeignBound, "a foreign client's longest wait")
				assert.Greater(t, run.grants, 5, "our Lockers are granted too")
				if mode == "seen" {
					// 3.2s: two cycles of 700ms and a 900ms gap, three of 700ms and 300ms.
					recent := grantRate(t, cfg, "n", 3200*time.Millisecond)
					// The mark lives 10 minutes from the last sighting: 8m59s
					// left is a sighting more than a minute ago.
					k := keysOf(cfg.Prefix, "n")
					require.True(t, newClient(t, srv.Addr()).PExpire(context.Background(), k.foreign, 8*time.Minute+59*time.Second).Val())
					aged := grantRate(t, cfg, "n", 3200*time.Millisecond)
					unmarked := grantRate(t, cfg, "m", 3200*time.Millisecond)
					t.Logf("%s: ours alone, on the marked lock %.1f grants/s (%.0f%%) with a foreign holder seen within the last minute (900ms gaps), %.1f grants/s (%.0f%%) after (300ms gaps), on an unmarked one %.1f grants/s",
						impl, recent, 100*recent/unmarked, aged, 100*aged/unmarked, unmarked)
				}
			})
		}
	}
}

// seeForeign makes a Locker with cfg see a foreign holder on lock name: a
// redislock client holds it while the Locker tries.
func seeForeign(t *testing.T, cfg Config, name string) {
	ctx := tctx(t, 10*time.Second)
	k := keysOf(cfg.Prefix, name)
	theirs, err := redislock.New(newClient(t, srv.Addr())).Obtain(ctx, k.lock, 15*time.Second, nil)
	require.NoError(t, err)
	_, err = locker(t, srv.Addr(), cfg).TryAcquire(ctx, name)
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.NoError(t, theirs.Release(ctx))
	require.Equal(t, int64(1), newClient(t, srv.Addr()).Exists(ctx, k.foreign).Val(), "a foreign holder seen")
}

// grantRate runs two fencelock Lockers with cfg on lock name for d (see
// hold) and returns their grants per second.
func grantRate(t *testing.T, cfg Config, name string, d time.Duration) float64 {
	key := LockKey(cfg.Prefix, name)
	admin := newClient(t, srv.Addr())
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()
	var mu sync.Mutex
	var last fencing.Token
	var n int
	var wg sync.WaitGroup
	start := time.Now()
	for range 2 {
		l := locker(t, srv.Addr(), cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			hold(ctx, t, l, admin, name, key, &mu, &last, &n)
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// TestMixedFleetWithoutGaps: the same fleet with the gaps turned off
// (ForeignInterval -1), our Lockers stopping after 5s: the foreign
// clients are starved while our queue stays busy. It only reports the
// waits (what the gaps fix); a release of ours that finds our queue empty
// by chance (a Locker descheduled between its release and its next
// acquire) lets a foreign client in sooner.
func TestMixedFleetWithoutGaps(t *testing.T) {
	t.Parallel() // 12s of waiting; its own prefixes and children
	for _, impl := range []string{"redislock", "redsync"} {
		t.Run(impl, func(t *testing.T) {
			run := runMixedFleet(t, impl, Config{Prefix: testPrefix(t), ForeignInterval: -1}, 10, 5*time.Second)
			slices.Sort(run.waits)
			t.Logf("%s without gaps: foreign waits median %v, max %v (all: %v); ours: %d grants in %v",
				impl, median(run.waits), run.waits[len(run.waits)-1], run.waits, run.grants, run.took.Round(time.Millisecond))
		})
	}
}
