package zookeeper

import (
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// TestLockDelayMarker: an acquisition with a lock-delay keeps a marker
// node in the lock's directory that its release deletes; when its node is deleted by someone else, the
// marker stays, a TryAcquire finds the lock held and marks the marker
// ended, and once the delay has passed since then a TryAcquire deletes it
// and takes the lock.
func TestLockDelayMarker(t *testing.T) {
	prefix := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	a := dialLocker(t, srv.Addr(), prefix, 4*time.Second)
	b := dialLocker(t, srv.Addr(), prefix, 4*time.Second)
	ctx := tctx(t, time.Minute)
	const delay = 1500 * time.Millisecond
	markers := func(name string) []string {
		kids, _, err := admin.Children(lockDir(prefix, name))
		require.NoError(t, err)
		var out []string
		for _, k := range kids {
			if strings.HasPrefix(k, markerPrefix) {
				out = append(out, lockDir(prefix, name)+"/"+k)
			}
		}
		return out
	}
	exists := func(name string) bool { return len(markers(name)) > 0 }

	ls, err := a.TryAcquire(ctx, "released", backend.WithLockDelay(delay))
	require.NoError(t, err)
	require.True(t, exists("released"))
	require.NoError(t, ls.Release(ctx))
	require.False(t, exists("released"), "a release leaves no marker")
	lb, err := b.TryAcquire(ctx, "released")
	require.NoError(t, err, "a released lock is free at once")
	require.NoError(t, lb.Release(ctx))

	ls, err = a.TryAcquire(ctx, "deleted", backend.WithLockDelay(delay))
	require.NoError(t, err)
	node, st := nodeOf(t, admin, prefix, ls)
	require.NoError(t, admin.Delete(node, st.Version))
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("no loss signal")
	}
	require.ErrorIs(t, ls.Release(ctx), backend.ErrLeaseLost)
	require.True(t, exists("deleted"), "a release after a loss leaves the marker")
	_, err = b.TryAcquire(ctx, "deleted")
	require.ErrorIs(t, err, backend.ErrNotAcquired, "the first TryAcquire in the lock-delay")
	seen := time.Now()
	left := markers("deleted")
	require.Len(t, left, 1)
	_, mst, err := admin.Get(left[0])
	require.NoError(t, err)
	require.EqualValues(t, 2, mst.Version, "marked held (1), then ended (2)")
	_, err = b.TryAcquire(ctx, "deleted")
	require.ErrorIs(t, err, backend.ErrNotAcquired, "a TryAcquire still in the lock-delay")
	for {
		lb, err = b.TryAcquire(ctx, "deleted")
		if err == nil {
			break
		}
		require.ErrorIs(t, err, backend.ErrNotAcquired)
		require.Less(t, time.Since(seen), delay+5*time.Second, "the marker must not block beyond its delay")
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("taken %v after the end was first seen (lock-delay %v)", time.Since(seen), delay)
	require.GreaterOrEqual(t, time.Since(seen), delay-time.Second, "not long before the delay (clocks of one machine)")
	require.False(t, exists("deleted"), "the marker went with the delay")
	require.NoError(t, lb.Release(ctx))
}

// TestLockDelayMarkerNotHeldIgnored: a marker whose acquisition never held
// the lock (made just before its lock node, or a waiter's that ended)
// delays nobody and is not touched while young: a waiter and a TryAcquire
// granted beside it return at once, and it stays for its acquisition.
func TestLockDelayMarkerNotHeldIgnored(t *testing.T) {
	prefix := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	a := dialLocker(t, srv.Addr(), prefix, 4*time.Second)
	b := dialLocker(t, srv.Addr(), prefix, 4*time.Second)
	ctx := tctx(t, time.Minute)
	const delay = 30 * time.Second
	// A holder with a delay makes the directory; its clean release leaves
	// no marker of its own.
	ls, err := a.Acquire(ctx, "n", backend.WithLockDelay(delay))
	require.NoError(t, err)
	pending := lockDir(prefix, "n") + "/" + markerPrefix + "0123456789abcdef0123456789abcdef"
	_, err = admin.Create(pending, []byte("30000"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	ch := make(chan error, 1)
	go func() {
		lb, err := b.Acquire(ctx, "n") // queued behind a: it reads the marker
		if err == nil {
			err = lb.Release(ctx)
		}
		ch <- err
	}()
	time.Sleep(500 * time.Millisecond)
	released := time.Now()
	require.NoError(t, ls.Release(ctx))
	select {
	case err := <-ch:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was held by a marker never held")
	}
	t.Logf("granted and released %v after the release", time.Since(released))
	lt, err := b.TryAcquire(ctx, "n")
	require.NoError(t, err, "a TryAcquire beside a marker never held")
	require.NoError(t, lt.Release(ctx))
	_, st, err := admin.Get(pending)
	require.NoError(t, err, "a young marker never held stays")
	require.EqualValues(t, 0, st.Version, "and is not marked ended")
}
