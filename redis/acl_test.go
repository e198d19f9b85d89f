package redis

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/locktest"
)

// aclRules is the least a fencelock user needs under prefix, as the
// package documentation states it (Permissions): the keys and channels
// under prefix, the script commands and what the scripts call, SUBSCRIBE
// for the wake channel and PING for Open. TestMinimalACL runs the
// conformance suite with exactly these, and checks that each is needed.
func aclRules(prefix string) []string {
	return []string{
		"~" + prefix + ":*", "&" + prefix + ":*",
		"+evalsha", "+eval", "+subscribe", "+ping",
		// what the scripts call
		"+get", "+set", "+del", "+pexpire", "+pttl", "+incr", "+time", "+publish",
		"+zadd", "+zrem", "+zrange", "+zrangebyscore", "+zremrangebyscore", "+zscore",
	}
}

// dialGate is a client hook that lets the first pass dials through and
// holds every later one (in these tests: the pub/sub connection, dialled
// when a Locker first waits) until open is closed or the dial's context
// ends.
type dialGate struct {
	pass  int32
	dials atomic.Int32
	open  chan struct{}
}

func newDialGate(t testing.TB, pass int32) *dialGate {
	g := &dialGate{pass: pass, open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

func (g *dialGate) release() {
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *dialGate) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g.dials.Add(1) > g.pass {
			select {
			case <-g.open:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return next(ctx, network, addr)
	}
}

func (g *dialGate) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (g *dialGate) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// userClient returns a client of the shared server that logs in as user
// (password s3cret), with gate as its dial hook if not nil.
func userClient(t testing.TB, user string, gate *dialGate) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: user, Password: "s3cret"})
	if gate != nil {
		c.AddHook(gate)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// without returns rules without the rule drop.
func without(rules []string, drop string) []string {
	var out []string
	for _, r := range rules {
		if r != drop {
			out = append(out, r)
		}
	}
	return out
}

// waiters returns the number of waiters of lock n as l's Status shows them.
func waiters(t testing.TB, l *backend.Locker, name string) int {
	st, err := l.Status(tctx(t, 10*time.Second), name)
	require.NoError(t, err)
	return len(st.Waiters)
}

// TestWakeChannelRefused: a user whose ACL covers the keys but not the wake
// channel cannot be told that a release granted it the lock. Its wait fails
// at once with the server's refusal (ErrPermission, NOPERM), not at its
// context's deadline as "not acquired" while the lock is handed to it, and
// it leaves the queue.
func TestWakeChannelRefused(t *testing.T) {
	prefix := testPrefix(t)
	srv.SetUser(t, "fl-nochannel", "s3cret", without(aclRules(prefix), "&"+prefix+":*")...)
	full := locker(t, srv.Addr(), Config{Prefix: prefix})
	held, err := full.TryAcquire(tctx(t, 10*time.Second), "n", backend.WithTTL(30*time.Second))
	require.NoError(t, err)

	lb, err := New(userClient(t, "fl-nochannel", nil), Config{Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lb.Close() })
	start := time.Now()
	_, err = lb.Acquire(tctx(t, 30*time.Second), "n")
	took := time.Since(start)
	t.Logf("refused after %v: %v", took, err)
	require.ErrorIs(t, err, backend.ErrPermission)
	require.ErrorContains(t, err, "NOPERM", "the server's message stays")
	require.ErrorContains(t, err, "&"+prefix+":*", "the error says what the ACL lacks")
	require.NotErrorIs(t, err, backend.ErrNotAcquired)
	require.Less(t, took, 10*time.Second, "at once, not at the context's deadline (30s)")
	require.Eventually(t, func() bool { return waiters(t, full, "n") == 0 }, 5*time.Second, 5*time.Millisecond,
		"out of the queue")

	// Every wait asks again (the ACL may have been fixed): the same
	// refusal, and still nothing left behind.
	_, err = lb.Acquire(tctx(t, 30*time.Second), "n")
	require.ErrorIs(t, err, backend.ErrPermission)
	release(t, held)
}

// TestRefusedWaiterHandsOnGrant: a release hands the lock to a waiter
// whose subscription the server then refuses. The waiter fails, and its
// failure releases the grant to the next waiter, rather than leaving
// everyone behind it waiting for the grant's TTL (30s here). A user
// without SUBSCRIBE but with the channel wakes the next waiter at once; a
// user without the channel cannot publish either, so its release hands the
// lock over without a message, and the next waiter finds it at its next
// renewal (a third of its TTL).
func TestRefusedWaiterHandsOnGrant(t *testing.T) {
	for _, c := range []struct {
		name  string
		drop  func(prefix string) string
		ttlC  time.Duration // the next waiter's TTL
		woken bool          // whether it is woken by a message
	}{
		{"NoSubscribe", func(string) string { return "+subscribe" }, 30 * time.Second, true},
		{"NoChannel", func(prefix string) string { return "&" + prefix + ":*" }, 3 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := testPrefix(t)
			user := "fl-refused-" + c.name
			srv.SetUser(t, user, "s3cret", without(aclRules(prefix), c.drop(prefix))...)
			admin := newClient(t, srv.Addr())
			ctx := tctx(t, 60*time.Second)
			la := locker(t, srv.Addr(), Config{Prefix: prefix})
			held, err := la.TryAcquire(ctx, "n", backend.WithTTL(30*time.Second))
			require.NoError(t, err)

			// B's pub/sub dial waits at the gate, so its subscription is
			// pending while the release grants it the lock.
			gate := newDialGate(t, 1)
			lb, db := driverLocker(t, userClient(t, user, gate), Config{Prefix: prefix})
			chB := goAcquire(ctx, lb, "n", backend.WithTTL(30*time.Second))
			require.Eventually(t, func() bool { return waiters(t, la, "n") == 1 }, 10*time.Second, 5*time.Millisecond)
			lc, dc := driverLocker(t, newClient(t, srv.Addr()), Config{Prefix: prefix})
			chC := goAcquire(ctx, lc, "n", backend.WithTTL(c.ttlC))
			require.Eventually(t, func() bool { return waiters(t, la, "n") == 2 }, 10*time.Second, 5*time.Millisecond)

			release(t, held)
			v, err := admin.Get(ctx, LockKey(prefix, "n")).Result()
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(v, db.id+"."), "the release granted the lock to B: %q", v)

			start := time.Now()
			gate.release() // B's SUBSCRIBE reaches the server, which refuses it
			rb := waitAcquired(t, chB, 10*time.Second)
			require.ErrorIs(t, rb.Err, backend.ErrPermission)
			require.ErrorContains(t, rb.Err, "NOPERM")
			rc := waitAcquired(t, chC, 20*time.Second)
			require.NoError(t, rc.Err)
			took := time.Since(start)
			t.Logf("C granted %v after B's subscription was refused (B's grant had a 30s TTL, C's renewal period is %v)",
				took, c.ttlC/3)
			require.Less(t, took, 15*time.Second, "well before B's grant (30s) would have expired")
			if c.woken {
				require.Equal(t, int64(1), dc.wakeups.Load(), "C was woken by the release of B's grant")
			} else {
				require.Zero(t, dc.wakeups.Load(), "B may not publish: C found the grant itself")
			}
			require.Greater(t, rc.Lease.Token(), held.Token())
			release(t, rc.Lease)
		})
	}
}

// TestPendingSubscriptionFindsGrant: while a Locker's first subscription
// is pending (its dial is slow), its waiter's renewals and fallback timer
// still run, and find a grant a release handed it.
func TestPendingSubscriptionFindsGrant(t *testing.T) {
	prefix := testPrefix(t)
	ctx := tctx(t, 60*time.Second)
	la := locker(t, srv.Addr(), Config{Prefix: prefix})
	held, err := la.TryAcquire(ctx, "n", backend.WithTTL(30*time.Second))
	require.NoError(t, err)

	gate := newDialGate(t, 1) // never opened: the subscription stays pending
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	c.AddHook(gate)
	t.Cleanup(func() { _ = c.Close() })
	lb, db := driverLocker(t, c, Config{Prefix: prefix})
	chB := goAcquire(ctx, lb, "n", backend.WithTTL(1500*time.Millisecond))
	require.Eventually(t, func() bool { return waiters(t, la, "n") == 1 }, 10*time.Second, 5*time.Millisecond)
	start := time.Now()
	release(t, held) // grants B the lock; the message cannot reach it
	r := waitAcquired(t, chB, 15*time.Second)
	require.NoError(t, r.Err)
	t.Logf("granted %v after the release, with the subscription pending", time.Since(start))
	require.False(t, db.hub.subscribed())
	require.Zero(t, db.wakeups.Load(), "no message: found by a renewal or the fallback timer")
	require.Greater(t, r.Lease.Token(), held.Token())
	release(t, r.Lease)
}

// TestMinimalACL runs the conformance suite, through the URL form, as a
// user with exactly aclRules (ACL SETUSER ... reset on >pass rules...: no
// other command, key or channel), so that a change that needs a new
// permission fails here; the package documentation's Permissions section
// states the same rules.
func TestMinimalACL(t *testing.T) {
	const prefix = "fl-min"
	srv.SetUser(t, "fencelock-min", "s3cret", aclRules(prefix)...)
	raw := "redis://fencelock-min:s3cret@" + srv.Addr() + "/0?prefix=" + prefix
	caps, err := conformance.URLCapabilities(tctx(t, 30*time.Second), raw)
	require.NoError(t, err)
	h, err := conformance.NewURLHarness(raw, caps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	conformance.Run(t, h, locktest.RestrictedUserRun()...)
}

// useEverything runs, as the user of raw, every kind of request the
// adapter makes, each command the scripts call included: Open (PING),
// TryAcquire after SCRIPT FLUSH (EVALSHA, then EVAL; the fast path),
// Refresh, a wait (the queue, SUBSCRIBE), Status, a release that hands the
// lock over (PUBLISH), Revoke, and an acquisition that purges a lapsed
// queue entry and whose token counter is ahead of the clock (INCR). It
// returns the first error.
func useEverything(t *testing.T, raw, prefix string) error {
	ctx := tctx(t, 20*time.Second)
	admin := newClient(t, srv.Addr())
	la, err := backend.Open(ctx, raw)
	if err != nil {
		return err
	}
	defer la.Close()
	lb, err := backend.Open(ctx, raw)
	if err != nil {
		return err
	}
	defer lb.Close()
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	ls, err := la.TryAcquire(ctx, "n")
	if err != nil {
		return err
	}
	defer func() { _ = ls.Release(context.Background()) }()
	if err := ls.Refresh(ctx); err != nil {
		return err
	}
	ch := goAcquire(ctx, lb, "n")
	for {
		st, err := la.Status(ctx, "n")
		if err != nil {
			return err
		}
		if len(st.Waiters) == 1 {
			break
		}
		select {
		case r := <-ch:
			return r.Err // failed without queueing (or, wrongly, granted)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := ls.Release(ctx); err != nil {
		return err
	}
	r := <-ch
	if r.Err != nil {
		return r.Err
	}
	if _, err := la.Revoke(ctx, "n", r.Lease.Token()); err != nil {
		return err
	}
	if err := useCandidates(ctx, la, lb); err != nil {
		return err
	}
	k := keysOf(prefix, "m")
	// A counter ahead of the clock (a server whose clock went back) is
	// incremented (INCR) rather than raised to the clock.
	require.NoError(t, admin.Set(ctx, k.counter, "9000000000000000", 0).Err())
	require.NoError(t, admin.ZAdd(ctx, k.queue, goredis.Z{Score: 1, Member: "gone"}).Err())
	require.NoError(t, admin.ZAdd(ctx, k.expiry, goredis.Z{Score: 1, Member: "gone"}).Err()) // lapsed long ago
	lm, err := la.Acquire(ctx, "m")
	if err != nil {
		return err
	}
	return lm.Release(ctx)
}

// useCandidates runs what election candidates (WithValue) add to the
// requests useEverything makes: a value stored by the acquire script of a
// holder and of a waiter, Status reading them, Proclaim, and a release
// that removes the value and hands the lock to a candidate. It returns the
// first error.
func useCandidates(ctx context.Context, la, lb *backend.Locker) error {
	ls, err := la.TryAcquire(ctx, "v", backend.WithValue("a"))
	if err != nil {
		return err
	}
	defer func() { _ = ls.Release(context.Background()) }()
	ch := goAcquire(ctx, lb, "v", backend.WithValue("b"))
	for {
		st, err := la.Status(ctx, "v")
		if err != nil {
			return err
		}
		if len(st.Waiters) == 1 && st.Waiters[0].Value == "b" && st.Holder.Value == "a" {
			break
		}
		select {
		case r := <-ch:
			return r.Err // failed without queueing (or, wrongly, granted)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := ls.Proclaim(ctx, "a2"); err != nil {
		return err
	}
	if err := ls.Release(ctx); err != nil {
		return err
	}
	r := <-ch
	if r.Err != nil {
		return r.Err
	}
	return r.Lease.Release(ctx)
}

// TestACLEachRuleNeeded: with all of aclRules, useEverything works; with any
// one of them less, it fails at once with an error matching
// backend.ErrPermission that keeps the server's message, never a hang or a
// "not acquired". Options that send more commands need their rule too:
// client_name CLIENT SETNAME, a database other than 0 SELECT, wait_replicas
// WAIT.
func TestACLEachRuleNeeded(t *testing.T) {
	// check runs useEverything as a user with rules (PREFIX stands for
	// the test's prefix), with path and query added to the URL.
	check := func(t *testing.T, rules []string, path, query string, want error) {
		// Names without characters that URLs or ACL patterns read.
		n := prefixSeq.Add(1)
		prefix, user := fmt.Sprintf("fl-rule-%d", n), fmt.Sprintf("fl-rule-%d", n)
		var rs []string
		for _, r := range rules {
			rs = append(rs, strings.ReplaceAll(r, "PREFIX", prefix))
		}
		srv.SetUser(t, user, "s3cret", rs...)
		start := time.Now()
		err := useEverything(t, "redis://"+user+":s3cret@"+srv.Addr()+path+"?prefix="+prefix+query, prefix)
		took := time.Since(start)
		if want == nil {
			require.NoError(t, err)
			return
		}
		t.Logf("failed after %v: %v", took, err)
		require.ErrorIs(t, err, want)
		if want == backend.ErrPermission {
			var re goredis.Error
			require.ErrorAs(t, err, &re, "the server's message stays")
			require.NotErrorIs(t, err, backend.ErrNotAcquired)
		}
		require.Less(t, took, 10*time.Second, "at once, not at a deadline")
	}
	all := aclRules("PREFIX")
	t.Run("All", func(t *testing.T) { check(t, all, "", "", nil) })
	for _, r := range all {
		t.Run("Without"+r, func(t *testing.T) { check(t, without(all, r), "", "", backend.ErrPermission) })
	}
	for _, o := range []struct {
		rule, path, query string
		with              error // what useEverything returns with the rule
	}{
		{"+client|setname", "", "&client_name=fl", nil},
		{"+select", "/1", "", nil},
		// No replica here: WAIT runs and reports none.
		{"+wait", "", "&wait_replicas=1&wait_timeout=50ms", ErrNotReplicated},
	} {
		t.Run(o.rule, func(t *testing.T) {
			t.Run("With", func(t *testing.T) { check(t, append(all, o.rule), o.path, o.query, o.with) })
			t.Run("Without", func(t *testing.T) { check(t, all, o.path, o.query, backend.ErrPermission) })
		})
	}
}
