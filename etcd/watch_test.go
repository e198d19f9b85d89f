package etcd

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/etcdtest"
)

// recorder is a watchOwner that keeps what it is told.
type recorder struct {
	mu    sync.Mutex
	resps []*pb.WatchResponse
}

func (r *recorder) watchResponse(_ *keyWatch, resp *pb.WatchResponse) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resps = append(r.resps, resp)
}

func (r *recorder) events() (n int, canceled bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, resp := range r.resps {
		n += len(resp.Events)
		canceled = canceled || resp.Canceled
	}
	return n, canceled
}

// The hub's watches created at once each get their own key's events only;
// a removed watch gets none; with none left the hub's goroutines end.
func TestHubWatchesManyKeys(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	ctx := tctx(t, 10*time.Second)
	_, err := c.Get(ctx, pfx) // connect before counting
	require.NoError(t, err)
	before := runtime.NumGoroutine()
	h := newWatchHub(c)
	defer h.close()

	const n = 50
	ws := make([]*keyWatch, n)
	rs := make([]*recorder, n)
	for i := range ws {
		rs[i] = &recorder{}
		ws[i] = &keyWatch{key: pfx + "/" + string(rune('a'+i%26)) + string(rune('a'+i/26)), owner: rs[i]}
		require.True(t, h.add(ws[i]))
	}
	h.remove(ws[0])
	require.Eventually(t, func() bool {
		for _, r := range rs[1:] {
			r.mu.Lock()
			created := len(r.resps) > 0 && r.resps[0].Created
			r.mu.Unlock()
			if !created {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "every watch is created")
	for _, w := range ws {
		_, err := c.Put(ctx, w.key, "v")
		require.NoError(t, err)
	}
	for i, r := range rs[1:] {
		require.Eventually(t, func() bool { n, _ := r.events(); return n == 1 }, 10*time.Second, 5*time.Millisecond, "watch %d", i+1)
	}
	n0, _ := rs[0].events()
	assert.Zero(t, n0, "the removed watch got no event")
	for _, w := range ws[1:] {
		h.remove(w)
	}
	// (Not Eventually: it runs its condition on a goroutine of its own.)
	for end := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if !assert.LessOrEqual(t, runtime.NumGoroutine(), before, "with no watch left the hub stops within hubLinger") {
		buf := make([]byte, 1<<20)
		t.Logf("%s", buf[:runtime.Stack(buf, true)])
	}
}

// A watch whose start revision was compacted is cancelled and removed, and
// its owner told with the compaction revision.
func TestHubWatchCompacted(t *testing.T) {
	pfx := testPrefix(t)
	c := client(t)
	ctx := tctx(t, 10*time.Second)
	h := newWatchHub(c)
	defer h.close()
	first, err := c.Put(ctx, pfx+"/k", "1")
	require.NoError(t, err)
	last, err := c.Put(ctx, pfx+"/k", "2")
	require.NoError(t, err)
	_, err = c.Compact(ctx, last.Header.Revision)
	require.NoError(t, err)

	r := &recorder{}
	w := &keyWatch{key: pfx + "/k", from: first.Header.Revision, owner: r}
	require.True(t, h.add(w))
	require.Eventually(t, func() bool { _, canceled := r.events(); return canceled }, 10*time.Second, 5*time.Millisecond)
	r.mu.Lock()
	last1 := r.resps[len(r.resps)-1]
	r.mu.Unlock()
	assert.Positive(t, last1.CompactRevision)
	h.mu.Lock()
	assert.Empty(t, h.watches, "the cancelled watch is removed")
	h.mu.Unlock()
}

// The watch of a held key resumes when its stream fails (here, the server
// restarts), from the revision after the last it saw: a delete after the
// restart is still the loss.
func TestOwnKeyWatchResumesAfterRestart(t *testing.T) {
	s := etcdtest.Start(t)
	pfx := testPrefix(t)
	c := s.NewClient(t)
	l, err := New(c, Config{Prefix: pfx}, backend.WithTTL(long))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ls, err := l.Acquire(tctx(t, 10*time.Second), "r")
	require.NoError(t, err)
	key := string(keyOf(t, c, pfx, ls).Key)
	time.Sleep(4 * ownWatchDelay) // the watch is on
	began := time.Now()
	require.NoError(t, s.Restart())
	t.Logf("restarted in %v", time.Since(began))

	other := s.NewClient(t)
	_, err = other.Delete(tctx(t, 10*time.Second), key)
	require.NoError(t, err)
	select {
	case <-ls.Done():
		t.Logf("loss %v after the restart began", time.Since(began))
	case <-time.After(10 * time.Second):
		t.Fatal("loss signal did not fire within 10s of the key's deletion after a restart (renewal is 10s away and finds the lease alive)")
	}
	assert.Contains(t, ls.Err().Error(), "was deleted at revision")
}

// A watch of our key that the server cancels because its start revision was
// compacted has the key read and watched again from the revision read: a
// later delete is the loss.
func TestOwnKeyWatchAfterCompaction(t *testing.T) {
	s := etcdtest.Start(t) // compaction would not disturb other tests' watches, but keep it apart
	pfx := testPrefix(t)
	c := s.NewClient(t)
	d := newDriver(c, pfx, false)
	defer d.Shutdown(context.Background())
	ctx := tctx(t, 10*time.Second)
	lost := make(chan error, 1)
	dl, _, err := d.NewLease(ctx, driver.Request{Name: "k", TTL: long, Lost: func(err error) {
		select {
		case lost <- err:
		default:
		}
	}})
	require.NoError(t, err)
	_, err = dl.Lock(ctx, false)
	require.NoError(t, err)
	l := dl.(*lease)
	l.mu.Lock()
	l.ownTimer.Stop() // start the watch by hand, once its start revision is compacted
	l.mu.Unlock()
	for range 2 {
		_, err = c.Put(ctx, pfx+"/other", "x")
		require.NoError(t, err)
	}
	resp, err := c.Get(ctx, pfx+"/other")
	require.NoError(t, err)
	_, err = c.Compact(ctx, resp.Header.Revision)
	require.NoError(t, err)
	l.startOwnWatch()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.own != nil && l.ownFrom > resp.Header.Revision
	}, 10*time.Second, 5*time.Millisecond, "watched again from after the compaction")
	select {
	case err := <-lost:
		t.Fatalf("loss reported for a key still there: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	_, err = c.Delete(ctx, l.key)
	require.NoError(t, err)
	select {
	case err := <-lost:
		assert.Contains(t, err.Error(), "was deleted at revision")
	case <-time.After(10 * time.Second):
		t.Fatal("the delete was not reported")
	}
	require.ErrorIs(t, dl.Release(ctx, false), backend.ErrLeaseLost, "the key was deleted")
}

// A client whose Watcher is wrapped (a namespace) is refused: the driver
// watches through the client's connection, which the wrapper does not
// see, so it would watch other keys than it writes.
func TestWrappedWatcherRefused(t *testing.T) {
	c := srv.NewClient(t)
	c.Watcher = namespace.NewWatcher(c.Watcher, "ns/")
	_, err := New(c, Config{Prefix: "locks"})
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	require.ErrorIs(t, err, errWatchedThroughWrapper)
}

// A watch refused because the hub's stream carries an expired auth token
// (simple tokens expire; a stream keeps the token it was opened with) has
// the stream opened again, which authenticates anew: the watch of a key
// acquired after the expiry still reports its deletion.
func TestOwnKeyWatchAfterTokenExpiry(t *testing.T) {
	s := etcdtest.Start(t, etcdtest.WithAuth("root-pw", appUser),
		etcdtest.WithConfig(func(c *embed.Config) { c.AuthTokenTTL = 1 }))
	c, err := s.ClientAs(appUser.Name, appUser.Password)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c, Config{Prefix: "locks"}, backend.WithTTL(long))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	first, err := l.Acquire(tctx(t, 10*time.Second), "first")
	require.NoError(t, err)
	defer release(t, first)
	time.Sleep(4 * ownWatchDelay)       // the hub's stream is open, with the token of now
	time.Sleep(2500 * time.Millisecond) // the token expires (its TTL is 1s, checked every second)

	ls, err := l.Acquire(tctx(t, 10*time.Second), "second")
	require.NoError(t, err)
	root := s.NewClient(t)
	key := string(keyOf(t, root, "locks", ls).Key)
	time.Sleep(4 * ownWatchDelay)
	_, err = root.Delete(tctx(t, 10*time.Second), key)
	require.NoError(t, err)
	select {
	case <-ls.Done():
		assert.Contains(t, ls.Err().Error(), "was deleted at revision")
	case <-time.After(5 * time.Second):
		t.Fatal("the deletion was not reported within 5s (renewal is 10s away and finds the lease alive)")
	}
}

// A watch refused for permission is ErrPermission, whether the server gives
// the bare error text (etcd 3.4) or the whole gRPC error (3.5 and later) as
// its reason: a waiter whose predecessor watch is refused must fail so, not
// wait until its context ends and look like a held lock.
func TestWatchRefusedForPermission(t *testing.T) {
	for _, reason := range []string{"etcdserver: permission denied", rpctypes.ErrGRPCPermissionDenied.Error()} {
		err := mapErr(watchCancelError(&pb.WatchResponse{Canceled: true, CancelReason: reason}))
		assert.ErrorIs(t, err, backend.ErrPermission, "reason %q", reason)
	}
}
