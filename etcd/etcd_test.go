package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
)

const long = 30 * time.Second // a TTL that never expires during a test

func TestGrantTokenIsCreateRevision(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	l := locker(t, pfx, backend.WithTTL(long), backend.WithHolder("worker-7"),
		backend.WithMetadata(map[string]string{"job": "nightly"}))

	ls, err := l.Acquire(tctx(t, 10*time.Second), "jobs-1")
	require.NoError(t, err)
	kvs := keys(t, c, pfx, "jobs-1")
	require.Len(t, kvs, 1)
	kv := kvs[0]
	assert.Equal(t, int64(ls.Token()), kv.CreateRevision, "token is the key's create revision")
	assert.NotZero(t, kv.Lease, "key is attached to a lease")
	assert.Equal(t, fmt.Sprintf("%s/jobs-1/%x", pfx, kv.Lease), string(kv.Key), "Mutex key layout")
	var v keyValue
	require.NoError(t, json.Unmarshal(kv.Value, &v))
	assert.Equal(t, keyValue{Holder: "worker-7", Metadata: map[string]string{"job": "nightly"}}, v)

	// The lease has the requested TTL and is renewed by the shared layer.
	ttl, err := c.TimeToLive(tctx(t, 10*time.Second), clientv3.LeaseID(kv.Lease))
	require.NoError(t, err)
	assert.Equal(t, int64(long/time.Second), ttl.GrantedTTL)

	release(t, ls)
	assert.Empty(t, keys(t, c, pfx, "jobs-1"), "release deletes the key")

	ls2, err := l.TryAcquire(tctx(t, 10*time.Second), "jobs-1")
	require.NoError(t, err)
	assert.Greater(t, ls2.Token(), ls.Token())
	assert.Equal(t, int64(ls2.Token()), keys(t, c, pfx, "jobs-1")[0].CreateRevision)
	release(t, ls2)
}

// Two acquisitions of one name through one Locker have their own leases,
// keys and tokens, and exclude each other (etcd#11360).
func TestSameLockerExcludes(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	l := locker(t, pfx, backend.WithTTL(long))

	a, err := l.Acquire(tctx(t, 10*time.Second), "x")
	require.NoError(t, err)
	_, err = l.TryAcquire(tctx(t, 10*time.Second), "x")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	assert.Contains(t, err.Error(), "token")

	ch := goAcquire(tctx(t, 30*time.Second), l, "x")
	requireBlocked(t, ch, 300*time.Millisecond)
	kvs := waitKeys(t, c, pfx, "x", 2)
	assert.NotEqual(t, kvs[0].Lease, kvs[1].Lease, "each acquisition has its own lease")

	release(t, a)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	assert.Greater(t, r.Lease.Token(), a.Token())
	assert.Equal(t, kvs[1].CreateRevision, int64(r.Lease.Token()))
	release(t, r.Lease)
}

// Waiters are granted in the order they queued.
func TestFIFO(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	holder := locker(t, pfx, backend.WithTTL(long))
	h, err := holder.Acquire(tctx(t, 10*time.Second), "q")
	require.NoError(t, err)

	const n = 5
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		l := locker(t, pfx, backend.WithTTL(long))
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls, err := l.Acquire(tctx(t, 60*time.Second), "q")
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			assert.NoError(t, ls.Release(context.Background()))
		}()
		waitKeys(t, c, pfx, "q", i+2) // queued before the next one starts
	}
	release(t, h)
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
}

// Under contention every grant excludes every other and tokens grow in grant
// order.
func TestContendedExclusion(t *testing.T) {
	pfx := testPrefix(t)
	const workers, rounds = 4, 15
	var inside atomic.Int32
	var mu sync.Mutex
	var last uint64
	var wg sync.WaitGroup
	for range workers {
		l := locker(t, pfx, backend.WithTTL(long))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				ls, err := l.Acquire(tctx(t, 60*time.Second), "hot")
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, int32(1), inside.Add(1), "two holders at once")
				mu.Lock()
				assert.Greater(t, uint64(ls.Token()), last, "tokens grow in grant order")
				last = uint64(ls.Token())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				assert.NoError(t, ls.Release(context.Background()))
			}
		}()
	}
	wg.Wait()
}

// A cancelled waiter leaves no key behind, and the next Acquire is granted at
// once when the holder releases.
func TestCancelWhileWaitingLeavesNoKey(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	a, b := locker(t, pfx, backend.WithTTL(long)), locker(t, pfx, backend.WithTTL(long))
	h, err := a.Acquire(tctx(t, 10*time.Second), "c")
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(context.Background())
	ch := goAcquire(wctx, b, "c")
	// Its key showed up before its answer did once, beside a second test
	// run: cancelled then, the wait was reported ErrUnavailable.
	waitQueued(t, c, pfx, "c", 2)
	cancel()
	r := waitAcquired(t, ch, 5*time.Second)
	require.ErrorIs(t, r.Err, backend.ErrNotAcquired)
	require.ErrorIs(t, r.Err, context.Canceled)
	kvs := keys(t, c, pfx, "c")
	require.Len(t, kvs, 1, "only the holder's key is left")
	assert.Equal(t, int64(h.Token()), kvs[0].CreateRevision)

	// A waiter queued behind a cancelled one moves on to the holder: it is
	// not granted while the holder holds, and is granted when it releases.
	w1ctx, w1cancel := context.WithCancel(context.Background())
	defer w1cancel()
	w1 := goAcquire(w1ctx, b, "c")
	waitKeys(t, c, pfx, "c", 2)
	w2 := goAcquire(tctx(t, 30*time.Second), locker(t, pfx, backend.WithTTL(long)), "c")
	waitKeys(t, c, pfx, "c", 3)
	w1cancel()
	require.ErrorIs(t, waitAcquired(t, w1, 5*time.Second).Err, context.Canceled)
	requireBlocked(t, w2, 300*time.Millisecond)
	release(t, h)
	r2 := waitAcquired(t, w2, 5*time.Second)
	require.NoError(t, r2.Err)
	release(t, r2.Lease)
	assert.Empty(t, keys(t, c, pfx, "c"))
}

// A waiter whose lease is revoked stops waiting with ErrLeaseLost, promptly
// (its TTL is long), and is never told it holds the lock (etcd#19597,
// etcd#11456).
func TestWaiterLeaseRevoked(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	a, b := locker(t, pfx, backend.WithTTL(long)), locker(t, pfx, backend.WithTTL(long))
	h, err := a.Acquire(tctx(t, 10*time.Second), "r")
	require.NoError(t, err)
	ch := goAcquire(tctx(t, 60*time.Second), b, "r")
	kvs := waitKeys(t, c, pfx, "r", 2)

	start := time.Now()
	_, err = c.Revoke(tctx(t, 10*time.Second), clientv3.LeaseID(kvs[1].Lease))
	require.NoError(t, err)
	r := waitAcquired(t, ch, 10*time.Second)
	require.ErrorIs(t, r.Err, backend.ErrLeaseLost)
	require.Nil(t, r.Lease)
	assert.Less(t, time.Since(start), 5*time.Second)

	// The holder is unaffected, and the lock is handed over normally.
	require.NoError(t, h.Err())
	ch = goAcquire(tctx(t, 30*time.Second), b, "r")
	waitKeys(t, c, pfx, "r", 2)
	release(t, h)
	r = waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	release(t, r.Lease)
}

// Reads per wait: a waiter queued right behind the holder reads when it
// queues and when its watch is created, and takes its turn on the holder's
// deletion without a third; a waiter queued behind it reads once more, on
// its predecessor's deletion (it is not told when that one became the
// holder). One wake-up per release either way.
func TestWaitReads(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	holder := locker(t, pfx, backend.WithTTL(long))
	d := newDriver(client(t), pfx, false)
	waiters, err := backend.New(d, backend.WithTTL(long))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiters.Close() })

	h, err := holder.Acquire(tctx(t, 10*time.Second), "r")
	require.NoError(t, err)
	second := goAcquire(tctx(t, 60*time.Second), waiters, "r")
	waitQueued(t, c, pfx, "r", 2)
	third := goAcquire(tctx(t, 60*time.Second), waiters, "r")
	waitQueued(t, c, pfx, "r", 3)
	require.Eventually(t, func() bool { return d.reads.Load() == 4 }, 10*time.Second, time.Millisecond,
		"two reads each while they wait")
	release(t, h)
	r := waitAcquired(t, second, 10*time.Second)
	require.NoError(t, r.Err)
	assert.Equal(t, int64(4), d.reads.Load(), "the second's turn was not read")
	requireBlocked(t, third, 100*time.Millisecond)
	release(t, r.Lease)
	r = waitAcquired(t, third, 10*time.Second)
	require.NoError(t, r.Err)
	assert.Equal(t, int64(5), d.reads.Load(), "the third read its turn")
	assert.Equal(t, int64(2), d.wakeups.Load(), "one wake-up per release")
	release(t, r.Lease)
}

// A waiter next in line whose key is deleted just before its predecessor's
// (in one Txn, or in two writes one after the other) is not granted the
// lock. Its last read showed the predecessor as the only older key, so it
// takes its turn on the predecessor's deletion without reading again, and
// it must see that its own key went first: the one watch of both keys
// delivers the deletions in revision order. Its wait ends with
// ErrLeaseLost, and the lock is free. (On a busy machine the waiter may not
// have read yet when the keys go: it then finds out by that read.)
func TestWaiterKeyDeletedBeforeTurn(t *testing.T) {
	for _, how := range []string{"TxnWaiterFirst", "TxnHolderFirst", "TwoWrites"} {
		t.Run(how, func(t *testing.T) {
			pfx := testPrefix(t)
			c := client(t)
			a, b := locker(t, pfx, backend.WithTTL(long)), locker(t, pfx, backend.WithTTL(long))
			_, err := a.Acquire(tctx(t, 10*time.Second), "r")
			require.NoError(t, err)
			ch := goAcquire(tctx(t, 60*time.Second), b, "r")
			// Its key is there; a few ms later it has read, and watches, and
			// the watch of its own key, which would tell it of the
			// deletion too, is not on yet (it starts ownWatchDelay after
			// the key's creation, then catches up in etcd's 100 ms resync).
			kvs := waitKeys(t, c, pfx, "r", 2)
			time.Sleep(ownWatchDelay / 3)
			holderKey, waiterKey := string(kvs[0].Key), string(kvs[1].Key)
			ctx := tctx(t, 10*time.Second)
			switch how {
			case "TxnWaiterFirst":
				_, err = c.Txn(ctx).Then(clientv3.OpDelete(waiterKey), clientv3.OpDelete(holderKey)).Commit()
			case "TxnHolderFirst": // one revision: the events' order within it does not matter
				_, err = c.Txn(ctx).Then(clientv3.OpDelete(holderKey), clientv3.OpDelete(waiterKey)).Commit()
			default:
				_, err = c.Delete(ctx, waiterKey)
				require.NoError(t, err)
				_, err = c.Delete(ctx, holderKey)
			}
			require.NoError(t, err)
			r := waitAcquired(t, ch, 10*time.Second)
			require.ErrorIs(t, r.Err, backend.ErrLeaseLost)
			require.Nil(t, r.Lease)
			free, err := locker(t, pfx).TryAcquire(tctx(t, 10*time.Second), "r")
			require.NoError(t, err, "the lock is free")
			release(t, free)
		})
	}
}

// A holder whose lease is revoked sees its loss signal promptly (from the
// watch on its own key, long before its next renewal).
func TestHolderLeaseRevokedFiresLoss(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	l := locker(t, pfx, backend.WithTTL(long))
	ls, err := l.Acquire(tctx(t, 10*time.Second), "h")
	require.NoError(t, err)
	kv := keyOf(t, c, pfx, ls)
	_, err = c.Revoke(tctx(t, 10*time.Second), clientv3.LeaseID(kv.Lease))
	require.NoError(t, err)
	select {
	case <-ls.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("loss signal did not fire within 5s of the revoke (renewal is 10s away)")
	}
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, ls.Release(tctx(t, 10*time.Second)), backend.ErrLeaseLost)

	// Deleting the key by hand is a loss too.
	ls, err = l.Acquire(tctx(t, 10*time.Second), "h")
	require.NoError(t, err)
	_, err = c.Delete(tctx(t, 10*time.Second), string(keyOf(t, c, pfx, ls).Key))
	require.NoError(t, err)
	select {
	case <-ls.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("loss signal did not fire within 5s of deleting the key")
	}
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
	assert.Regexp(t, `lock key .* (was deleted at revision|is gone)`, ls.Err().Error(), "the cause says why")
}

// A put on the holder's key by another client (no lease: the key would
// outlive the holder, and status would show a holder that is not) is a
// loss, seen from the watch on the key, before or after the watch starts;
// the holder's clean-up then removes the key, so the lock is not stuck.
func TestForeignPutOnKeyFiresLoss(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	l := locker(t, pfx, backend.WithTTL(long))
	for _, after := range []time.Duration{0, 2 * ownWatchDelay} {
		ls, err := l.Acquire(tctx(t, 10*time.Second), "h")
		require.NoError(t, err)
		key := string(keyOf(t, c, pfx, ls).Key)
		time.Sleep(after)
		_, err = c.Put(tctx(t, 10*time.Second), key, "someone else")
		require.NoError(t, err)
		select {
		case <-ls.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("loss signal did not fire within 5s of a foreign put %v after the grant (renewal is 10s away)", after)
		}
		require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
		require.ErrorIs(t, ls.Err(), backend.ErrDeleted, "an overwritten key is the key removed")
		assert.Contains(t, ls.Err().Error(), "overwritten by another client", "the cause says why")
		require.Eventually(t, func() bool {
			resp, err := c.Get(tctx(t, 10*time.Second), key)
			return err == nil && len(resp.Kvs) == 0
		}, 10*time.Second, 10*time.Millisecond, "the overwritten key, with no lease, is removed")
		_ = ls.Release(tctx(t, 10*time.Second))
		next, err := l.TryAcquire(tctx(t, 10*time.Second), "h")
		require.NoError(t, err, "the lock is free again")
		release(t, next)
	}
}

// A stale Release never deletes a newer holder's key.
func TestReleaseNeverDeletesNewerHolder(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	a, b := locker(t, pfx, backend.WithTTL(long)), locker(t, pfx, backend.WithTTL(long))

	la, err := a.Acquire(tctx(t, 10*time.Second), "s")
	require.NoError(t, err)
	_, err = c.Revoke(tctx(t, 10*time.Second), clientv3.LeaseID(keyOf(t, c, pfx, la).Lease))
	require.NoError(t, err)
	lb, err := b.Acquire(tctx(t, 10*time.Second), "s")
	require.NoError(t, err)
	require.ErrorIs(t, la.Release(tctx(t, 10*time.Second)), backend.ErrLeaseLost)
	kvs := keys(t, c, pfx, "s")
	require.Len(t, kvs, 1, "B's key is intact")
	assert.Equal(t, int64(lb.Token()), kvs[0].CreateRevision)
	release(t, lb)
}

// The same, at the driver level, with the harder case: our key name deleted
// and re-created (same name, later revision) by someone else. A release bound
// only to the key name would delete it.
func TestDriverReleaseBoundToRevision(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	d := newDriver(c, pfx, false)
	defer d.Shutdown(context.Background())
	ctx := tctx(t, 10*time.Second)

	dl, _, err := d.NewLease(ctx, driver.Request{Name: "s", TTL: long, Lost: func(error) {}})
	require.NoError(t, err)
	g, err := dl.Lock(ctx, true)
	tok := g.Token
	require.NoError(t, err)
	l := dl.(*lease)
	_, err = c.Delete(ctx, l.key)
	require.NoError(t, err)
	put, err := c.Put(ctx, l.key, "newer")
	require.NoError(t, err)
	require.Greater(t, put.Header.Revision, int64(tok))

	require.ErrorIs(t, dl.Release(ctx, false), backend.ErrLeaseLost)
	kvs := keys(t, c, pfx, "s")
	require.Len(t, kvs, 1, "the newer key is intact")
	assert.Equal(t, put.Header.Revision, kvs[0].CreateRevision)
	assert.Equal(t, "newer", string(kvs[0].Value))
}

// Release of an acquisition whose Lock never wrote a key is nil, as is that
// of a TryAcquire's grant. (A driver's Release is called once it succeeded
// no more: backend memoizes it, and its tests check that.)
func TestDriverReleaseWithoutKey(t *testing.T) {
	c := client(t)
	d := newDriver(c, testPrefix(t), false)
	defer d.Shutdown(context.Background())
	ctx := tctx(t, 10*time.Second)
	dl, _, err := d.NewLease(ctx, driver.Request{Name: "n", TTL: long, Lost: func(error) {}})
	require.NoError(t, err)
	require.NoError(t, dl.Release(ctx, false))

	dl, _, err = d.NewLease(ctx, driver.Request{Name: "n", TTL: long, Lost: func(error) {}})
	require.NoError(t, err)
	_, err = dl.Lock(ctx, false)
	require.NoError(t, err)
	require.NoError(t, dl.Release(ctx, false))
}

// An etcd concurrency.Mutex on prefix+"/"+name and this package exclude each
// other both ways.
func TestInteropMutex(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	l := locker(t, pfx, backend.WithTTL(long))
	sess, err := concurrency.NewSession(client(t), concurrency.WithTTL(30))
	require.NoError(t, err)
	defer sess.Close()
	m := concurrency.NewMutex(sess, pfx+"/jobs-1")

	// Mutex holds: we cannot take it, and wait until it unlocks.
	require.NoError(t, m.Lock(tctx(t, 10*time.Second)))
	_, err = l.TryAcquire(tctx(t, 10*time.Second), "jobs-1")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	ch := goAcquire(tctx(t, 30*time.Second), l, "jobs-1")
	requireBlocked(t, ch, 300*time.Millisecond)
	mutexRev := keys(t, c, pfx, "jobs-1")[0].CreateRevision
	require.NoError(t, m.Unlock(tctx(t, 10*time.Second)))
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	assert.Greater(t, int64(r.Lease.Token()), mutexRev)

	// We hold: the Mutex cannot take it, and waits until we release.
	require.ErrorIs(t, m.TryLock(tctx(t, 10*time.Second)), concurrency.ErrLocked)
	done := make(chan error, 1)
	go func() { done <- m.Lock(tctx(t, 30*time.Second)) }()
	select {
	case err := <-done:
		t.Fatalf("Mutex locked while we hold: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	release(t, r.Lease)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Mutex not granted after our release")
	}
	_, err = l.TryAcquire(tctx(t, 10*time.Second), "jobs-1")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.NoError(t, m.Unlock(tctx(t, 10*time.Second)))
}

// Names map to disjoint key directories under the prefix, and a plain name
// maps to itself.
func TestNameEscaping(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	l := locker(t, pfx, backend.WithTTL(long))
	names := []string{"a", "a/b", "a/../b", "b", "..", ".", "/", "%2F", "a%2Fb", "a b", "ä/ö", "a/", "/a"}
	var leases []*backend.Lease
	for _, n := range names {
		ls, err := l.TryAcquire(tctx(t, 10*time.Second), n)
		require.NoError(t, err, "name %q is its own lock", n)
		leases = append(leases, ls)
	}
	ks := allKeys(t, c, pfx)
	require.Len(t, ks, len(names))
	for _, k := range ks {
		rest := strings.TrimPrefix(k, pfx+"/")
		require.Equal(t, 1, strings.Count(rest, "/"), "key %q: one name segment and one lease segment", k)
	}
	for i, n := range names {
		kvs := keys(t, c, pfx, n)
		require.Len(t, kvs, 1, "name %q sees only its own key", n)
		assert.Equal(t, int64(leases[i].Token()), kvs[0].CreateRevision)
	}
	assert.Equal(t, pfx+"/jobs-1/", nameDir(pfx, "jobs-1"))
	for _, ls := range leases {
		release(t, ls)
	}
	assert.Empty(t, allKeys(t, c, pfx))
}

func TestTTLValidation(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	l := locker(t, pfx)

	_, err := l.Acquire(tctx(t, 10*time.Second), "t", backend.WithTTL(1500*time.Millisecond))
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	assert.Contains(t, err.Error(), "whole seconds")

	_, err = New(c, Config{Prefix: pfx}, backend.WithTTL(500*time.Millisecond))
	require.ErrorIs(t, err, backend.ErrInvalidOption)

	// 1s is below the embedded server's minimum (2s with default election
	// settings): the server would raise it, so it is refused by name.
	before, err := c.Leases(tctx(t, 10*time.Second))
	require.NoError(t, err)
	_, err = l.Acquire(tctx(t, 10*time.Second), "t", backend.WithTTL(time.Second))
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	assert.Contains(t, err.Error(), "minimum of 2s")
	require.Eventually(t, func() bool {
		after, err := c.Leases(context.Background())
		return err == nil && len(after.Leases) <= len(before.Leases)
	}, 10*time.Second, 10*time.Millisecond, "the raised lease is revoked")
	assert.Empty(t, allKeys(t, c, pfx))

	ls, err := l.Acquire(tctx(t, 10*time.Second), "t", backend.WithTTL(2*time.Second))
	require.NoError(t, err)
	release(t, ls)
}

// Released leases are reused by the next acquisition; a pooled lease revoked
// behind our back is replaced by a fresh one.
func TestLeasePool(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	d := newDriver(c, pfx, false)
	l, err := backend.New(d, backend.WithTTL(long))
	require.NoError(t, err)
	defer l.Close()
	leaseOf := func(ls *backend.Lease) clientv3.LeaseID {
		return clientv3.LeaseID(keyOf(t, c, pfx, ls).Lease)
	}

	a, err := l.Acquire(tctx(t, 10*time.Second), "p")
	require.NoError(t, err)
	idA := leaseOf(a)
	release(t, a)
	b, err := l.Acquire(tctx(t, 10*time.Second), "other-name")
	require.NoError(t, err)
	assert.Equal(t, idA, leaseOf(b), "second acquire reuses the released lease")
	release(t, b)

	// Revoke the pooled lease behind the Locker's back.
	_, err = c.Revoke(tctx(t, 10*time.Second), idA)
	require.NoError(t, err)
	for _, wait := range []bool{true, false} {
		acquire := l.Acquire
		if !wait {
			acquire = l.TryAcquire
		}
		ls, err := acquire(tctx(t, 10*time.Second), "p")
		require.NoError(t, err, "a revoked idle lease is replaced (wait=%v)", wait)
		id := leaseOf(ls)
		assert.NotEqual(t, idA, id)
		require.NoError(t, ls.Err())
		release(t, ls)
		// Next round: revoke the lease this one returned to the pool.
		_, err = c.Revoke(tctx(t, 10*time.Second), id)
		require.NoError(t, err)
		idA = id
	}

	// The pool keeps at most poolSize leases per TTL.
	var held []*backend.Lease
	for i := range poolSize + 2 {
		ls, err := l.TryAcquire(tctx(t, 10*time.Second), fmt.Sprint("many-", i))
		require.NoError(t, err)
		held = append(held, ls)
	}
	for _, ls := range held {
		release(t, ls)
	}
	d.mu.Lock()
	n := len(d.pool[int64(long/time.Second)])
	d.mu.Unlock()
	assert.Equal(t, poolSize, n)

	// Close revokes the pooled leases.
	d.mu.Lock()
	var ids []clientv3.LeaseID
	for _, il := range d.pool[int64(long/time.Second)] {
		ids = append(ids, il.id)
	}
	d.mu.Unlock()
	require.NoError(t, l.Close())
	for _, id := range ids {
		ttl, err := c.TimeToLive(tctx(t, 10*time.Second), id)
		require.NoError(t, err)
		assert.Equal(t, int64(-1), ttl.TTL, "lease %x revoked on Close", int64(id))
	}
}

// New does not close the caller's client; a Locker opened by URL closes its
// own.
func TestClientOwnership(t *testing.T) {
	c := client(t)
	l, err := New(c, Config{Prefix: testPrefix(t)})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	_, err = c.Put(tctx(t, 10*time.Second), "still-open", "yes")
	require.NoError(t, err)

	u := strings.Replace(srv.Endpoints()[0], "http://", "etcd://", 1) + "/" + testPrefix(t) + "?ttl=5s&dial_timeout=2s"
	drv, err := open(context.Background(), mustParse(t, u))
	require.NoError(t, err)
	dc := drv.(*etcdDriver).client
	require.NoError(t, drv.Shutdown(context.Background()))
	require.Error(t, dc.Ctx().Err(), "the URL driver closed its client")
}

// No goroutine outlives Release and Close.
func TestNoGoroutineLeak(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	settle := func() int {
		n := runtime.NumGoroutine()
		for range 100 {
			time.Sleep(20 * time.Millisecond)
			m := runtime.NumGoroutine()
			if m == n {
				return n
			}
			n = m
		}
		return n
	}
	// Warm the client up (its watch and lease streams) before counting.
	warm, err := New(c, Config{Prefix: pfx}, backend.WithTTL(long))
	require.NoError(t, err)
	ls, err := warm.Acquire(tctx(t, 10*time.Second), "warm")
	require.NoError(t, err)
	release(t, ls)
	require.NoError(t, warm.Close())
	before := settle()

	l, err := New(c, Config{Prefix: pfx}, backend.WithTTL(long))
	require.NoError(t, err)
	for range 5 {
		h, err := l.Acquire(tctx(t, 10*time.Second), "g")
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(context.Background())
		ch := goAcquire(wctx, l, "g")
		waitKeys(t, c, pfx, "g", 2)
		cancel()
		require.ErrorIs(t, waitAcquired(t, ch, 5*time.Second).Err, context.Canceled)
		ch = goAcquire(tctx(t, 10*time.Second), l, "g")
		waitKeys(t, c, pfx, "g", 2)
		release(t, h)
		r := waitAcquired(t, ch, 5*time.Second)
		require.NoError(t, r.Err)
		release(t, r.Lease)
	}
	require.NoError(t, l.Close())
	// The client's watch streams close on their own goroutines, which on a
	// loaded machine can pause longer than settle's 20ms between steps: a
	// leak is a count that stays up, so give it time to come down.
	after := settle()
	for end := time.Now().Add(5 * time.Second); after > before+2 && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
		after = runtime.NumGoroutine()
	}
	assert.LessOrEqual(t, after, before+2, "goroutines before %d, after %d", before, after)
	if after > before+2 {
		buf := make([]byte, 1<<20)
		t.Logf("%s", buf[:runtime.Stack(buf, true)])
	}
}
