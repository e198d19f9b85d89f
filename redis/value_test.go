package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/redistest"
)

// queuedAs waits until l's Status of name shows n waiters.
func queuedAs(t *testing.T, l *backend.Locker, name string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return waiters(t, l, name) == n }, 10*time.Second, 5*time.Millisecond)
}

// TestValueInStatus: Status shows a candidate's value (WithValue) for the
// holder and for each waiter, "" for a lock's waiter among them, and a
// status without candidates is one command, as before values existed.
func TestValueInStatus(t *testing.T) {
	cfg := Config{Prefix: testPrefix(t)}
	log := &cmdLog{}
	ac := newClient(t, srv.Addr())
	ac.AddHook(log)
	admin, _ := driverLocker(t, ac, cfg)
	l := locker(t, srv.Addr(), cfg)
	ctx := tctx(t, 30*time.Second)

	lk, err := l.TryAcquire(ctx, "lock")
	require.NoError(t, err)
	_, err = admin.Status(ctx, "lock") // connects and loads the script
	require.NoError(t, err)
	log.take()
	st, err := admin.Status(ctx, "lock")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Empty(t, st.Holder.Value)
	assert.Equal(t, []string{"evalsha"}, log.take(), "a lock's status: one script call")
	release(t, lk)

	held, err := l.TryAcquire(ctx, "n", backend.WithValue("alpha"))
	require.NoError(t, err)
	chB := goAcquire(ctx, l, "n", backend.WithValue("beta"))
	queuedAs(t, admin, "n", 1)
	chC := goAcquire(ctx, l, "n") // a lock's waiter among candidates
	queuedAs(t, admin, "n", 2)
	chD := goAcquire(ctx, l, "n", backend.WithValue("gamma ✓ {}:%"))
	queuedAs(t, admin, "n", 3)

	_, err = admin.Status(ctx, "n") // loads the values script
	require.NoError(t, err)
	log.take()
	st, err = admin.Status(ctx, "n")
	require.NoError(t, err)
	assert.Equal(t, []string{"evalsha", "evalsha"}, log.take(), "the status, then the candidates' values")
	require.NotNil(t, st.Holder)
	assert.Equal(t, held.Token(), st.Holder.Token)
	assert.Equal(t, "alpha", st.Holder.Value)
	assert.True(t, isCandidate(st.Holder.ID), st.Holder.ID)
	require.Len(t, st.Waiters, 3)
	assert.Equal(t, []string{"beta", "", "gamma ✓ {}:%"},
		[]string{st.Waiters[0].Value, st.Waiters[1].Value, st.Waiters[2].Value})
	assert.False(t, isCandidate(st.Waiters[1].ID), st.Waiters[1].ID)
	assert.Empty(t, st.Waiters[0].Holder, "a candidate stores no holder identity")

	release(t, held)
	for _, ch := range []<-chan acquired{chB, chC, chD} {
		r := waitAcquired(t, ch, 10*time.Second)
		require.NoError(t, r.Err)
		release(t, r.Lease)
	}
}

// TestProclaim: Proclaim replaces the holder's value and keeps its token
// and lease; waiters are still granted in FIFO order, by releases handing
// the lock over directly, and Status shows each new holder's value.
func TestProclaim(t *testing.T) {
	cfg := Config{Prefix: testPrefix(t)}
	admin := locker(t, srv.Addr(), cfg)
	ctx := tctx(t, 60*time.Second)
	lockers := make([]*backend.Locker, 3)
	for i := range lockers {
		lockers[i] = locker(t, srv.Addr(), cfg, backend.WithTTL(3*time.Second))
	}
	a, err := lockers[0].TryAcquire(ctx, "n", backend.WithValue("a1"))
	require.NoError(t, err)
	chB := goAcquire(ctx, lockers[1], "n", backend.WithValue("b1"))
	queuedAs(t, admin, "n", 1)
	chC := goAcquire(ctx, lockers[2], "n", backend.WithValue("c1"))
	queuedAs(t, admin, "n", 2)

	holder := func() *backend.Entry {
		st, err := admin.Status(ctx, "n")
		require.NoError(t, err)
		require.NotNil(t, st.Holder)
		return st.Holder
	}
	require.NoError(t, a.Proclaim(ctx, "a2"))
	assert.Equal(t, "a2", a.Value())
	h := holder()
	assert.Equal(t, a.Token(), h.Token, "the token is kept")
	assert.Equal(t, "a2", h.Value)
	require.NoError(t, a.Refresh(ctx), "the lease is not lost")
	require.NoError(t, a.Err())
	require.NoError(t, a.Proclaim(ctx, ""), "an empty value")
	assert.Equal(t, "", holder().Value)
	require.NoError(t, a.Proclaim(ctx, "a3"))

	// The release grants B the lock in its script (a direct hand-over):
	// B's value is already there.
	st, err := admin.Status(ctx, "n")
	require.NoError(t, err)
	release(t, a)
	v, err := newClient(t, srv.Addr()).Get(ctx, LockKey(cfg.Prefix, "n")).Result()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(v, st.Waiters[0].ID+":"), "the release granted the lock to B: %q", v)
	rb := waitAcquired(t, chB, 10*time.Second)
	require.NoError(t, rb.Err)
	h = holder()
	assert.Equal(t, rb.Lease.Token(), h.Token)
	assert.Greater(t, h.Token, a.Token())
	assert.Equal(t, "b1", h.Value)
	requireBlocked(t, chC, 100*time.Millisecond)
	require.NoError(t, rb.Lease.Proclaim(ctx, "b2"))
	assert.Equal(t, "b2", holder().Value)

	// Revoke hands the lock over too.
	found, err := admin.Revoke(ctx, "n", rb.Lease.Token())
	require.NoError(t, err)
	require.True(t, found)
	rc := waitAcquired(t, chC, 10*time.Second)
	require.NoError(t, rc.Err)
	h = holder()
	assert.Equal(t, rc.Lease.Token(), h.Token)
	assert.Equal(t, "c1", h.Value)

	// Proclaim survives a script cache flush (EVAL after NOSCRIPT).
	require.NoError(t, newClient(t, srv.Addr()).ScriptFlush(ctx).Err())
	require.NoError(t, rc.Lease.Proclaim(ctx, "c2"))
	assert.Equal(t, "c2", holder().Value)
	release(t, rc.Lease)
	<-rb.Lease.Done()
}

// TestProclaimNotHeld: a Proclaim by an acquisition whose lock was revoked
// (and handed to another candidate) fails with ErrLeaseLost and stores
// nothing: the new holder's value stays, and so does the old value of the
// revoked one until its release removes it.
func TestProclaimNotHeld(t *testing.T) {
	cfg := Config{Prefix: testPrefix(t)}
	raw := newClient(t, srv.Addr())
	admin := locker(t, srv.Addr(), cfg)
	l := locker(t, srv.Addr(), cfg, backend.WithTTL(30*time.Second)) // no renewal finds the loss first
	ctx := tctx(t, 30*time.Second)
	a, err := l.TryAcquire(ctx, "n", backend.WithValue("a1"))
	require.NoError(t, err)
	st, err := admin.Status(ctx, "n")
	require.NoError(t, err)
	aKey := valueKey(LockKey(cfg.Prefix, "n"), st.Holder.ID)
	chB := goAcquire(ctx, l, "n", backend.WithValue("b1"))
	queuedAs(t, admin, "n", 1)

	found, err := admin.Revoke(ctx, "n", a.Token())
	require.NoError(t, err)
	require.True(t, found)
	rb := waitAcquired(t, chB, 10*time.Second)
	require.NoError(t, rb.Err)
	v, err := raw.Get(ctx, aKey).Result()
	require.NoError(t, err)
	require.Equal(t, "a1", v, "the revoked holder's value key stays until it learns")

	err = a.Proclaim(ctx, "a2")
	require.ErrorIs(t, err, backend.ErrLeaseLost)
	require.ErrorIs(t, a.Err(), backend.ErrLeaseLost, "the loss signal fired")
	st, err = admin.Status(ctx, "n")
	require.NoError(t, err)
	assert.Equal(t, rb.Lease.Token(), st.Holder.Token)
	assert.Equal(t, "b1", st.Holder.Value)
	// The loss releases the lost lease in the background, which removes
	// its value key; "a2" is never stored.
	require.Eventually(t, func() bool {
		v, err := raw.Get(ctx, aKey).Result()
		require.NotEqual(t, "a2", v)
		return err != nil
	}, 10*time.Second, 5*time.Millisecond)
	release(t, rb.Lease)

	// The driver alone: the lock key holds another acquisition's value.
	_, d := driverLocker(t, newClient(t, srv.Addr()), cfg)
	dl, _, err := d.NewLease(ctx, driver.Request{Name: "m", TTL: 5 * time.Second, Value: ptr("x1"), Lost: func(error) {}})
	require.NoError(t, err)
	_, err = dl.Lock(ctx, false)
	require.NoError(t, err)
	k := keysOf(cfg.Prefix, "m")
	require.NoError(t, raw.Set(ctx, k.lock, "someone-else", time.Minute).Err())
	require.ErrorIs(t, dl.Proclaim(ctx, "x2"), backend.ErrLeaseLost)
	v, err = raw.Get(ctx, dl.(*lease).cand.keyName).Result()
	require.NoError(t, err)
	assert.Equal(t, "x1", v)
	require.ErrorIs(t, dl.Release(ctx, false), backend.ErrLeaseLost)
	require.NoError(t, raw.Del(ctx, k.lock).Err())
}

func ptr[T any](v T) *T { return &v }

// TestValueNothingLeftBehind: candidates leave no key behind after a
// release, a refused TryAcquire or a cancelled wait, and a crashed
// candidate's value key (holder or waiter) expires by itself.
func TestValueNothingLeftBehind(t *testing.T) {
	prefix := testPrefix(t)
	cfg := Config{Prefix: prefix}
	raw := newClient(t, srv.Addr())
	l := locker(t, srv.Addr(), cfg)
	ctx := tctx(t, 60*time.Second)
	valueKeys := func() []string {
		ks, err := raw.Keys(ctx, prefix+":*").Result()
		require.NoError(t, err)
		return filter(ks, func(k string) bool { return strings.Contains(k, valueKeyInfix) })
	}
	// What outlives the lock is the token counter and, where a wait was
	// cancelled while its last attempt was on its way (a busy machine
	// makes that likely), the acquisition's end mark, which expires.
	leftover := func() []string {
		ks, err := raw.Keys(ctx, prefix+":*").Result()
		require.NoError(t, err)
		return filter(ks, func(k string) bool {
			if strings.Contains(k, ":ended:") {
				// It lives endMarkTTLs times the TTL its owner id ends
				// with, a minute at least (-2: it has just expired).
				ttlMs, err := strconv.ParseInt(k[strings.LastIndexByte(k, '.')+1:], 10, 64)
				require.NoError(t, err, k)
				limit := max(endMarkTTLs*time.Duration(ttlMs)*time.Millisecond, endMarkMin)
				left, err := raw.PTTL(ctx, k).Result()
				require.NoError(t, err)
				return left != -2*time.Nanosecond && (left <= 0 || left > limit)
			}
			return !strings.HasSuffix(k, ":token")
		})
	}

	held, err := l.TryAcquire(ctx, "n", backend.WithValue("a"))
	require.NoError(t, err)
	require.Len(t, valueKeys(), 1)
	_, err = l.TryAcquire(ctx, "n", backend.WithValue("b"))
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.Len(t, valueKeys(), 1, "a refused TryAcquire stores no value")
	wctx, cancel := context.WithCancel(ctx)
	ch := goAcquire(wctx, l, "n", backend.WithValue("c"))
	queuedAs(t, l, "n", 1)
	require.Len(t, valueKeys(), 2, "a waiter's value is stored when it queues")
	cancel()
	r := waitAcquired(t, ch, 10*time.Second)
	require.ErrorIs(t, r.Err, backend.ErrNotAcquired)
	require.Len(t, valueKeys(), 1, "the cancelled wait's value is removed")
	release(t, held)
	require.Empty(t, leftover(), "only the token counter and expiring end marks outlive the lock")

	// Crashed candidates: a holder and a waiter that never renew nor
	// release (driver leases, abandoned).
	_, d := driverLocker(t, newClient(t, srv.Addr()), cfg)
	const ttl = 500 * time.Millisecond
	for i, wait := range []bool{false, true} {
		dl, _, err := d.NewLease(ctx, driver.Request{Name: "n", TTL: ttl, Value: ptr("crashed"), Lost: func(error) {}})
		require.NoError(t, err)
		if !wait {
			_, err = dl.Lock(ctx, false)
			require.NoError(t, err)
		} else {
			// Queued behind the crashed holder by one attempt (as a
			// waiter's first attempt queues it), then abandoned.
			_, err = d.acquire(ctx, dl.(*lease), queueJoin)
			require.NoError(t, err)
		}
		require.Len(t, valueKeys(), i+1)
	}
	for _, k := range valueKeys() {
		ms, err := raw.PTTL(ctx, k).Result()
		require.NoError(t, err)
		require.Greater(t, ms, time.Duration(0), "%s has an expiry", k)
		require.LessOrEqual(t, ms, 2*ttl, "%s lives at most two TTLs", k)
	}
	require.Eventually(t, func() bool { return len(leftover()) == 0 }, 20*time.Second, 20*time.Millisecond,
		"the crashed candidates' keys expire")
}

// TestValueRenewedWithLease: each renewal of a candidate's lease, held or
// waiting, renews its value key, so that it outlives the lock key and the
// queue entry; a lock's renewal sends what it did before values existed.
func TestValueRenewedWithLease(t *testing.T) {
	cfg := Config{Prefix: testPrefix(t)}
	raw := newClient(t, srv.Addr())
	l := locker(t, srv.Addr(), cfg, backend.WithTTL(time.Second))
	ctx := tctx(t, 60*time.Second)
	a, err := l.Acquire(ctx, "n", backend.WithValue("a"))
	require.NoError(t, err)
	ch := goAcquire(ctx, l, "n", backend.WithValue("b"))
	queuedAs(t, l, "n", 1)
	// Several TTLs later both value keys are still there: renewed.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		st, err := l.Status(ctx, "n")
		require.NoError(t, err)
		require.NoError(t, a.Err())
		require.Equal(t, "a", st.Holder.Value)
		require.Len(t, st.Waiters, 1)
		require.Equal(t, "b", st.Waiters[0].Value)
		lockLeft, err := raw.PTTL(ctx, LockKey(cfg.Prefix, "n")).Result()
		require.NoError(t, err)
		valueLeft, err := raw.PTTL(ctx, valueKey(LockKey(cfg.Prefix, "n"), st.Holder.ID)).Result()
		require.NoError(t, err)
		require.Greater(t, valueLeft, lockLeft, "the value key outlives the lock key")
		time.Sleep(100 * time.Millisecond)
	}
	release(t, a)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	release(t, r.Lease)
}

// TestProclaimWaitReplicas: with WaitReplicas, a candidate's value is on
// the replica when its grant and its Proclaim return, and a Proclaim no
// replica acknowledges fails with ErrUnavailable and ErrNotReplicated.
func TestProclaimWaitReplicas(t *testing.T) {
	p := redistest.Start(t)
	r := redistest.StartReplica(t, p)
	l, _ := driverLocker(t, p.NewClient(t), Config{WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
	replica := r.NewClient(t)
	ctx := tctx(t, 30*time.Second)
	a, err := l.TryAcquire(ctx, "n", backend.WithValue("a1"), backend.WithTTL(10*time.Second))
	require.NoError(t, err)
	st, err := l.Status(ctx, "n")
	require.NoError(t, err)
	key := valueKey(LockKey("", "n"), st.Holder.ID)
	v, err := replica.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "a1", v, "the grant's WAIT covers the value")
	require.NoError(t, a.Proclaim(ctx, "a2"))
	v, err = replica.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "a2", v, "the proclaim's WAIT covers the value")

	require.NoError(t, r.Pause())
	err = a.Proclaim(ctx, "a3")
	require.NoError(t, r.Resume())
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.ErrorIs(t, err, ErrNotReplicated)
	require.NoError(t, a.Err(), "an unacknowledged value does not lose the lease")
	require.NoError(t, a.Proclaim(ctx, "a4"), "asked again once the replica is back")
	release(t, a)
}

// TestLateAttemptKeepsValue: a copy of a candidate's attempt that lands
// after its grant (a retry whose first reply was lost) does not undo a
// Proclaim, and one that lands after the release (which left an end mark:
// the attempt's fate was unknown) stores no value.
func TestLateAttemptKeepsValue(t *testing.T) {
	prefix := testPrefix(t)
	raw := newClient(t, srv.Addr())
	_, d := driverLocker(t, newClient(t, srv.Addr()), Config{Prefix: prefix})
	ctx := tctx(t, 10*time.Second)
	dl, _, err := d.NewLease(ctx, driver.Request{Name: "n", TTL: 5 * time.Second, Value: ptr("v1"), Lost: func(error) {}})
	require.NoError(t, err)
	l := dl.(*lease)
	g, err := l.Lock(ctx, false)
	require.NoError(t, err)
	require.NoError(t, l.Proclaim(ctx, "v2"))
	res, err := d.acquire(ctx, l, queueNo) // the late copy
	require.NoError(t, err)
	require.True(t, res.granted)
	assert.Equal(t, int64(g.Token), res.token, "the same grant")
	v, err := raw.Get(ctx, l.cand.keyName).Result()
	require.NoError(t, err)
	assert.Equal(t, "v2", v)
	require.NoError(t, l.Release(ctx, false))

	dl, _, err = d.NewLease(ctx, driver.Request{Name: "n", TTL: 5 * time.Second, Value: ptr("w"), Lost: func(error) {}})
	require.NoError(t, err)
	l = dl.(*lease)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Lock(gone, false) // its fate unknown
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, l.Release(ctx, false))
	_, err = d.acquire(ctx, l, queueJoin)
	require.ErrorIs(t, err, backend.ErrLeaseLost)
	n, err := raw.Exists(ctx, l.cand.keyName, keysOf(prefix, "n").lock).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "value or lock key left by the late attempt")
}
