package etcd

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/etcdtest"
)

// A candidate's value is its key's raw value, and Status shows every
// entry's raw value: the candidates' values, and a lock acquisition's JSON
// record (with its holder parsed from it, as before).
func TestValueStoredRaw(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	l := locker(t, pfx, backend.WithTTL(long))
	ctx := tctx(t, 30*time.Second)

	h, err := l.Acquire(ctx, "e", backend.WithValue("leader-a"))
	require.NoError(t, err)
	assert.Equal(t, "leader-a", h.Value())
	assert.Equal(t, "", h.Holder())
	w1 := goAcquire(ctx, locker(t, pfx, backend.WithTTL(long)), "e", backend.WithValue(`{"x": "ü"}`))
	waitKeys(t, c, pfx, "e", 2)
	w2 := goAcquire(ctx, locker(t, pfx, backend.WithTTL(long), backend.WithHolder("worker-w")), "e")
	kvs := waitKeys(t, c, pfx, "e", 3)
	assert.Equal(t, "leader-a", string(kvs[0].Value), "stored as it is")
	assert.Equal(t, `{"x": "ü"}`, string(kvs[1].Value), "stored as it is")

	st, err := l.Status(ctx, "e")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "leader-a", st.Holder.Value)
	assert.Equal(t, "", st.Holder.Holder)
	assert.Nil(t, st.Holder.Metadata)
	assert.Equal(t, h.Token(), st.Holder.Token)
	require.Len(t, st.Waiters, 2)
	assert.Equal(t, `{"x": "ü"}`, st.Waiters[0].Value)
	assert.Equal(t, "", st.Waiters[0].Holder)
	assert.Equal(t, "worker-w", st.Waiters[1].Holder)
	var rec keyValue
	require.NoError(t, json.Unmarshal([]byte(st.Waiters[1].Value), &rec), "a lock acquisition's value is its JSON record")
	assert.Equal(t, keyValue{Holder: "worker-w"}, rec)

	release(t, h)
	r1 := waitAcquired(t, w1, 10*time.Second)
	require.NoError(t, r1.Err)
	release(t, r1.Lease)
	r2 := waitAcquired(t, w2, 10*time.Second)
	require.NoError(t, r2.Err)
	release(t, r2.Lease)
	assert.Empty(t, keys(t, c, pfx, "e"))
}

// Proclaim replaces the holder's value and keeps its token, key and lease,
// before and after the watch of its own key started; the holder does not
// take its own puts for a loss, its lease goes on being renewed, and the
// waiters behind it are not woken by them: they are granted in order when
// it releases.
func TestProclaim(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	const ttl = 2 * time.Second // renewed every ~700ms
	d := newDriver(client(t), pfx, false)
	l, err := backend.New(d, backend.WithTTL(ttl))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := tctx(t, 60*time.Second)

	h, err := l.Acquire(ctx, "p", backend.WithValue("v1"))
	require.NoError(t, err)
	first := keyOf(t, c, pfx, h)
	// Right after the grant: before the watch of its key starts (which
	// then replays this put).
	require.NoError(t, h.Proclaim(ctx, "v2"))
	w1 := goAcquire(ctx, l, "p", backend.WithValue("w1"))
	waitKeys(t, c, pfx, "p", 2)
	w2 := goAcquire(ctx, l, "p", backend.WithValue("w2"))
	waitKeys(t, c, pfx, "p", 3)
	time.Sleep(2 * ownWatchDelay)
	for _, v := range []string{"v3", "v3", ""} {
		require.NoError(t, h.Proclaim(ctx, v))
		assert.Equal(t, v, h.Value())
		kv := keyOf(t, c, pfx, h)
		assert.Equal(t, v, string(kv.Value))
		assert.Equal(t, first.Key, kv.Key)
		assert.Equal(t, first.Lease, kv.Lease, "the key keeps its lease")
		assert.Greater(t, kv.ModRevision, first.ModRevision)
		st, err := l.Status(ctx, "p")
		require.NoError(t, err)
		require.NotNil(t, st.Holder)
		assert.Equal(t, v, st.Holder.Value)
		assert.Equal(t, h.Token(), st.Holder.Token, "the token is unchanged")
		require.Len(t, st.Waiters, 2)
		assert.Equal(t, "w1", st.Waiters[0].Value)
	}
	require.NoError(t, h.Proclaim(ctx, "final"))

	// Past several renewals, beyond the TTL: still held, not lost, the
	// waiters still queued and never woken.
	time.Sleep(2 * ttl)
	select {
	case <-h.Done():
		t.Fatalf("the holder lost its lock after Proclaim: %v", h.Err())
	default:
	}
	require.NoError(t, h.Err())
	ttlResp, err := c.TimeToLive(ctx, clientv3.LeaseID(first.Lease))
	require.NoError(t, err)
	assert.Greater(t, ttlResp.TTL, int64(0), "the lease is alive")
	requireBlocked(t, w1, 0)
	requireBlocked(t, w2, 0)
	assert.Zero(t, d.wakeups.Load(), "a Proclaim woke a waiter")
	assert.Equal(t, "final", string(keyOf(t, c, pfx, h).Value))

	release(t, h)
	r1 := waitAcquired(t, w1, 10*time.Second)
	require.NoError(t, r1.Err)
	assert.Greater(t, r1.Lease.Token(), h.Token())
	requireBlocked(t, w2, 300*time.Millisecond)
	require.NoError(t, r1.Lease.Proclaim(ctx, "w1-leads"))
	requireBlocked(t, w2, 300*time.Millisecond)
	release(t, r1.Lease)
	r2 := waitAcquired(t, w2, 10*time.Second)
	require.NoError(t, r2.Err)
	assert.Greater(t, r2.Lease.Token(), r1.Lease.Token())
	release(t, r2.Lease)
	assert.Empty(t, keys(t, c, pfx, "p"))
	assert.Equal(t, int64(2), d.wakeups.Load(), "one wake-up per release")
}

// A Proclaim after the lock was revoked returns ErrLeaseLost and writes no
// key.
func TestProclaimAfterRevoke(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	l := locker(t, pfx, backend.WithTTL(long))
	admin := locker(t, pfx)
	ctx := tctx(t, 30*time.Second)

	h, err := l.Acquire(ctx, "r", backend.WithValue("a"))
	require.NoError(t, err)
	found, err := admin.Revoke(ctx, "r", h.Token())
	require.NoError(t, err)
	require.True(t, found)
	err = h.Proclaim(ctx, "b")
	require.ErrorIs(t, err, backend.ErrLeaseLost)
	assert.Empty(t, keys(t, c, pfx, "r"), "no key written")
	assert.Equal(t, "a", h.Value())
	_ = h.Release(ctx)
}

// At the driver level, so that no loss signal comes first: a Proclaim
// writes nothing, and returns ErrLeaseLost saying why, when the key is
// gone, was deleted and written again (same key, newer create revision),
// or was overwritten by another client (detached from the lease).
func TestDriverProclaimBoundToKey(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	d := newDriver(c, pfx, false)
	defer d.Shutdown(context.Background())
	ctx := tctx(t, 30*time.Second)
	v := "mine"

	for _, tc := range []struct {
		what   string
		change func(l *lease) // what happens to the key
		left   string         // the key's value then ("": none)
		says   string
		cause  error
	}{
		{"lease revoked", func(l *lease) {
			_, err := c.Revoke(ctx, l.id)
			require.NoError(t, err)
		}, "", "is gone", backend.ErrRevoked},
		{"key written again", func(l *lease) {
			_, err := c.Delete(ctx, l.key)
			require.NoError(t, err)
			_, err = c.Put(ctx, l.key, "newer")
			require.NoError(t, err)
		}, "newer", "deleted and written again", backend.ErrDeleted},
		{"key overwritten", func(l *lease) {
			_, err := c.Put(ctx, l.key, "theirs")
			require.NoError(t, err)
		}, "theirs", "overwritten by another client", backend.ErrDeleted},
	} {
		t.Run(tc.what, func(t *testing.T) {
			dl, _, err := d.NewLease(ctx, driver.Request{Name: "s", TTL: long, Value: &v, Lost: func(error) {}})
			require.NoError(t, err)
			_, err = dl.Lock(ctx, true)
			require.NoError(t, err)
			l := dl.(*lease)
			require.NoError(t, dl.Proclaim(ctx, "proclaimed"))
			tc.change(l)
			err = dl.Proclaim(ctx, "too late")
			require.ErrorIs(t, err, backend.ErrLeaseLost)
			require.ErrorIs(t, err, tc.cause)
			assert.Contains(t, err.Error(), tc.says)
			kvs := keys(t, c, pfx, "s")
			if tc.left == "" {
				assert.Empty(t, kvs, "no key written")
			} else {
				require.Len(t, kvs, 1)
				assert.Equal(t, tc.left, string(kvs[0].Value), "their value is intact")
				_, err = c.Delete(ctx, l.key)
				require.NoError(t, err)
			}
			_ = dl.Release(ctx, false)
		})
	}
}

// The check of the holder's key after its watch failed (see checkOwnKey)
// knows the puts of its Proclaims, including one whose answer was lost,
// for its own, and another client's put of another value for a loss even
// when it keeps the lease.
func TestCheckOwnKeyAfterProclaim(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	d := newDriver(c, pfx, false)
	defer d.Shutdown(context.Background())
	ctx := tctx(t, 30*time.Second)
	lost := make(chan error, 10)
	v := "v0"
	dl, _, err := d.NewLease(ctx, driver.Request{Name: "k", TTL: long, Value: &v, Lost: func(err error) { lost <- err }})
	require.NoError(t, err)
	defer dl.Release(ctx, false)
	_, err = dl.Lock(ctx, false)
	require.NoError(t, err)
	l := dl.(*lease)
	// Stop the watch, as a cancellation by the server would, and check.
	check := func() {
		l.stopWatchingOwnKey()
		l.mu.Lock()
		l.ownStopped = false
		l.mu.Unlock()
		l.checkOwnKey()
		require.Eventually(t, func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.own != nil || len(lost) > 0
		}, 10*time.Second, time.Millisecond, "watched again, or lost")
	}
	check()
	require.NoError(t, dl.Proclaim(ctx, "v1"))
	check()
	// A Proclaim whose answer was lost: its value stays proclaimed.
	l.mu.Lock()
	l.proclaimed = append(l.proclaimed, "v2")
	l.mu.Unlock()
	_, err = c.Put(ctx, l.key, "v2", clientv3.WithIgnoreLease())
	require.NoError(t, err)
	check()
	time.Sleep(2 * ownWatchDelay) // the watch would see a later put
	assert.Empty(t, lost, "the acquisition's own writes are no loss")

	_, err = c.Put(ctx, l.key, "intruder", clientv3.WithIgnoreLease())
	require.NoError(t, err)
	check()
	select {
	case err := <-lost:
		assert.Contains(t, err.Error(), "overwritten by another client")
	case <-time.After(10 * time.Second):
		t.Fatal("a foreign put that kept the lease was not reported")
	}
}

// Another client's put of another value on a candidate's key is a loss,
// seen by the watch of the key, even when it keeps the key's lease.
func TestForeignPutOnCandidateKeyFiresLoss(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	l := locker(t, pfx, backend.WithTTL(long))
	ctx := tctx(t, 30*time.Second)
	h, err := l.Acquire(ctx, "f", backend.WithValue("a"))
	require.NoError(t, err)
	require.NoError(t, h.Proclaim(ctx, "b"))
	key := string(keyOf(t, c, pfx, h).Key)
	time.Sleep(2 * ownWatchDelay)
	_, err = c.Put(ctx, key, "intruder", clientv3.WithIgnoreLease())
	require.NoError(t, err)
	select {
	case <-h.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("loss signal did not fire within 5s of a foreign put (renewal is 10s away)")
	}
	require.ErrorIs(t, h.Err(), backend.ErrLeaseLost)
	assert.Contains(t, h.Err().Error(), "overwritten by another client")
	_ = h.Release(ctx)
	require.Eventually(t, func() bool { return len(keys(t, c, pfx, "f")) == 0 }, 10*time.Second, 10*time.Millisecond)
}

// A Proclaim the cluster does not answer returns soon after its context
// ends, with an error matching ErrUnavailable (not a loss); once the cluster
// is back, Proclaim stores the value with the same token. A cancelled
// context ends it too.
func TestProclaimUnavailable(t *testing.T) {
	s := etcdtest.Start(t)
	pfx := testPrefix(t)
	l, err := New(s.NewClient(t), Config{Prefix: pfx}, backend.WithTTL(long))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := tctx(t, 60*time.Second)
	h, err := l.Acquire(ctx, "u", backend.WithValue("a"))
	require.NoError(t, err)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, h.Proclaim(cancelled, "never"), context.Canceled)

	s.Stop()
	const wait = time.Second
	pctx, pcancel := context.WithTimeout(ctx, wait)
	start := time.Now()
	err = h.Proclaim(pctx, "b")
	took := time.Since(start)
	pcancel()
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.NotErrorIs(t, err, backend.ErrLeaseLost)
	assert.Less(t, took, wait+5*time.Second, "returns soon after its context ends")
	require.NoError(t, h.Err())

	require.NoError(t, s.Restart())
	require.NoError(t, h.Proclaim(ctx, "b"))
	st, err := l.Status(ctx, "u")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "b", st.Holder.Value)
	assert.Equal(t, h.Token(), st.Holder.Token)
	time.Sleep(2 * ownWatchDelay)
	require.NoError(t, h.Err())
	release(t, h)
}
