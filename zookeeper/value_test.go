package zookeeper

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/zktest"
)

// curatorLeader reads the leader of the lock directory dir as Curator's
// LeaderSelector.getLeader() does: every child, sorted by what follows its
// last "lock-" (LockInternals.getSortedChildren with
// StandardLockInternalsDriver.standardFixForSorting), and the first one's
// data as UTF-8 (participantForPath); "" and false when there is none.
func curatorLeader(t *testing.T, c *zk.Conn, dir string) (string, bool) {
	t.Helper()
	kids, _, err := c.Children(dir)
	require.NoError(t, err)
	fix := func(s string) string {
		if i := strings.LastIndex(s, "lock-"); i >= 0 {
			return s[i+len("lock-"):]
		}
		return s
	}
	sort.Slice(kids, func(i, j int) bool { return fix(kids[i]) < fix(kids[j]) })
	if len(kids) == 0 {
		return "", false
	}
	data, _, err := c.Get(dir + "/" + kids[0])
	require.NoError(t, err)
	require.NotNil(t, data, "null data: Curator's participantForPath would fail on it")
	return string(data), true
}

// A candidate's value is its node's data as it is, "" as empty data (not
// null); Status shows it as Value for the holder and the waiters, beside a
// lock acquisition, whose Value is its JSON record, and a node another
// client made as Curator's LeaderSelector does (its participant id), which
// also holds the lock for fencelock's candidates. Curator's reading of the
// leader finds each holder's value in turn.
func TestValueStoredAndShown(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	l := dialLocker(t, srv.Addr(), pfx, suiteTTL)
	locks := dialLocker(t, srv.Addr(), pfx, suiteTTL, backend.WithHolder("worker-a"))
	ctx := tctx(t, 30*time.Second)
	dir := lockDir(pfx, "e")

	// A Curator LeaderSelector participant holds: its node is a protected
	// ephemeral sequential "lock-" node whose data is its id.
	release(t, mustTry(t, l, "e")) // creates the directory
	curator, err := admin.Create(dir+"/_c_2d1e0e3a-6f1b-4f4e-9b0c-1d2e3f4a5b6c-lock-", []byte("curator-1"),
		zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	lead := goAcquire(ctx, l, "e", backend.WithValue("http://10.0.0.1:8080"))
	waitNodes(t, admin, pfx, "e", 2)
	empty := goAcquire(ctx, l, "e", backend.WithValue(""))
	waitNodes(t, admin, pfx, "e", 3)
	lock := goAcquire(ctx, locks, "e", backend.WithMetadata(map[string]string{"run": "7"}))
	nodes := waitNodes(t, admin, pfx, "e", 4)

	st, err := l.Status(ctx, "e")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	require.Len(t, st.Waiters, 3)
	assert.Equal(t, "curator-1", st.Holder.Value)
	assert.Equal(t, curator[strings.LastIndexByte(curator, '/')+1:], st.Holder.ID)
	assert.Empty(t, st.Holder.Holder)
	assert.Equal(t, backend.Entry{ID: nodes[1], Value: "http://10.0.0.1:8080", Token: st.Waiters[0].Token, TTLLeft: -1}, st.Waiters[0])
	assert.Equal(t, backend.Entry{ID: nodes[2], Value: "", Token: st.Waiters[1].Token, TTLLeft: -1}, st.Waiters[1])
	assert.Equal(t, "worker-a", st.Waiters[2].Holder)
	assert.Equal(t, map[string]string{"run": "7"}, st.Waiters[2].Metadata)
	assert.JSONEq(t, `{"holder":"worker-a","metadata":{"run":"7"}}`, st.Waiters[2].Value)

	data, _, err := admin.Get(dir + "/" + nodes[1])
	require.NoError(t, err)
	assert.Equal(t, []byte("http://10.0.0.1:8080"), data, "the raw value")
	data, _, err = admin.Get(dir + "/" + nodes[2])
	require.NoError(t, err)
	assert.NotNil(t, data, "empty data, not null")
	assert.Empty(t, data)

	id, _ := curatorLeader(t, admin, dir)
	assert.Equal(t, "curator-1", id)
	requireBlocked(t, lead, 200*time.Millisecond)
	require.NoError(t, admin.Delete(curator, -1))
	r := waitAcquired(t, lead, 10*time.Second)
	require.NoError(t, r.Err)
	assert.Equal(t, "http://10.0.0.1:8080", r.Lease.Value())
	assert.Empty(t, r.Lease.Holder())
	id, _ = curatorLeader(t, admin, dir)
	assert.Equal(t, "http://10.0.0.1:8080", id, "Curator reads the candidate's value as the leader's id")

	release(t, r.Lease)
	r = waitAcquired(t, empty, 10*time.Second)
	require.NoError(t, r.Err)
	id, ok := curatorLeader(t, admin, dir)
	assert.True(t, ok)
	assert.Equal(t, "", id)
	release(t, r.Lease)
	r = waitAcquired(t, lock, 10*time.Second)
	require.NoError(t, r.Err)
	release(t, r.Lease)
}

// Proclaim replaces the holder's value in place: same node, same token,
// Status and Curator's reading show the new value, the lease is not lost,
// and the waiters (the one right behind, watching the holder's node, and
// the one two back, watching it too) are neither granted nor sent back to
// read the queue by the data change: they are granted in order when the
// holder releases, from the version Proclaim left (Release's versioned
// delete).
func TestProclaim(t *testing.T) {
	q := threeInLine(t, backend.WithValue("one"))
	admin := srv.Connect(t, 10*time.Second)
	a := q.held
	ctx := tctx(t, 30*time.Second)
	path, before := nodeOf(t, admin, q.pfx, a)
	for i, v := range []string{"two", "three", ""} {
		require.NoError(t, a.Proclaim(ctx, v))
		assert.Equal(t, v, a.Value())
		data, st, err := admin.Get(path)
		require.NoError(t, err)
		assert.Equal(t, []byte(v), data)
		assert.Equal(t, before.Czxid, st.Czxid, "the same node")
		assert.Equal(t, int32(i+1), st.Version)
		s, err := q.locker.Status(ctx, "n")
		require.NoError(t, err)
		require.NotNil(t, s.Holder)
		assert.Equal(t, a.Token(), s.Holder.Token, "the token is unchanged")
		assert.Equal(t, v, s.Holder.Value)
		require.Len(t, s.Waiters, 2)
	}
	id, _ := curatorLeader(t, admin, lockDir(q.pfx, "n"))
	assert.Equal(t, "", id)
	requireBlocked(t, q.chB, 300*time.Millisecond)
	requireBlocked(t, q.chC, 0)
	require.NoError(t, a.Err(), "a data change is not a loss")
	assert.Equal(t, int64(1), q.reads(), "C, two back, did not read the children again after the writes")

	release(t, a)
	rb := waitAcquired(t, q.chB, 10*time.Second)
	require.NoError(t, rb.Err)
	assert.Greater(t, rb.Lease.Token(), a.Token())
	requireBlocked(t, q.chC, 300*time.Millisecond)
	release(t, rb.Lease)
	rc := waitAcquired(t, q.chC, 10*time.Second)
	require.NoError(t, rc.Err)
	assert.Greater(t, rc.Lease.Token(), rb.Lease.Token())
	assert.Equal(t, int64(1), q.reads(), "C read the children after its first check only")
	release(t, rc.Lease)
	waitNodes(t, admin, q.pfx, "n", 0)
}

// A revoked candidate's Proclaim fails with ErrLeaseLost and writes
// nothing: through the Locker (whose lease may already know) and through
// the driver lease itself, before its node watch could tell it.
func TestProclaimAfterRevoke(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	cfg := Config{Servers: []string{srv.Addr()}, Prefix: pfx, SessionTimeout: ownWatchTTL}
	d, l := driverLocker(t, cfg)
	ctx := tctx(t, 30*time.Second)

	a := mustTry(t, l, "r", backend.WithValue("a"))
	ch := goAcquire(ctx, l, "r", backend.WithValue("b"))
	nodes := waitNodes(t, admin, pfx, "r", 2)
	found, err := l.Revoke(ctx, "r", a.Token())
	require.NoError(t, err)
	require.True(t, found)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	err = a.Proclaim(ctx, "stale")
	require.ErrorIs(t, err, backend.ErrLeaseLost)
	require.ErrorIs(t, a.Err(), backend.ErrLeaseLost)
	require.Equal(t, nodes[1:], lockNodes(t, admin, pfx, "r"), "no node created")
	data, st, err := admin.Get(lockDir(pfx, "r") + "/" + nodes[1])
	require.NoError(t, err)
	assert.Equal(t, "b", string(data), "the new holder's value is untouched")
	assert.Equal(t, int32(0), st.Version)
	release(t, r.Lease)

	// The driver's lease, its node deleted behind its back: no watch has
	// told it yet (it is set after ownWatchDelay), the setData finds the
	// node gone.
	v := "x"
	lost := make(chan error, 1)
	dl, _, err := d.NewLease(ctx, driver.Request{Name: "raw", TTL: ownWatchTTL, Value: &v, Lost: func(err error) {
		select {
		case lost <- err:
		default:
		}
	}})
	require.NoError(t, err)
	_, err = dl.Lock(ctx, false)
	require.NoError(t, err)
	nodes = lockNodes(t, admin, pfx, "raw")
	require.Len(t, nodes, 1)
	require.NoError(t, admin.Delete(lockDir(pfx, "raw")+"/"+nodes[0], -1))
	err = dl.Proclaim(ctx, "stale")
	require.ErrorIs(t, err, driver.ErrLeaseLost)
	require.ErrorIs(t, <-lost, driver.ErrLeaseLost, "the loss is reported")
	assert.Empty(t, lockNodes(t, admin, pfx, "raw"), "no node created")
	require.ErrorIs(t, dl.Release(ctx, false), driver.ErrLeaseLost)
}

// A Proclaim with no answer (the server's replies dropped) returns once
// its context ends, as unavailable; the write was applied all the same, so
// the next Proclaim, once the connection is back, finds another version
// than the one it knows, reads it and writes. While the connection is
// down, Proclaim fails at once as unavailable. None of it is a loss.
func TestProclaimUnavailable(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	p := zktest.NewProxy(t, srv.Addr())
	l := dialLocker(t, p.Addr(), pfx, ownWatchTTL)
	a := mustTry(t, l, "u", backend.WithValue("one"))
	path, _ := nodeOf(t, admin, pfx, a)

	p.DropReplies(true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := a.Proclaim(ctx, "two")
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 10*time.Second, "Proclaim returns soon after its context ends")
	require.Eventually(t, func() bool {
		data, _, err := admin.Get(path)
		return err == nil && string(data) == "two"
	}, 10*time.Second, 20*time.Millisecond, "the unanswered write was applied")

	_, changed := a.Suspended()
	p.Cut()
	p.DropReplies(false)
	requireReconnected(t, a, changed)
	require.NoError(t, a.Proclaim(tctx(t, 10*time.Second), "three"))
	data, st, err := admin.Get(path)
	require.NoError(t, err)
	assert.Equal(t, "three", string(data))
	assert.Equal(t, int32(2), st.Version)

	p.Kill()
	require.Eventually(t, func() bool { s, _ := a.Suspended(); return s }, 10*time.Second, 10*time.Millisecond)
	err = a.Proclaim(tctx(t, 10*time.Second), "four")
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.NotErrorIs(t, err, backend.ErrLeaseLost)
	p.Revive()
	require.Eventually(t, func() bool { s, _ := a.Suspended(); return !s }, 15*time.Second, 10*time.Millisecond,
		"the connection came back")

	require.NoError(t, a.Err())
	release(t, a)
	waitNodes(t, admin, pfx, "u", 0)
}

// Revoke finds and deletes a candidate's node while the candidate keeps
// proclaiming (its node's data version changing between Revoke's read and
// its delete): the revocation neither fails on the version nor misses, and
// the candidate's next Proclaim finds its lease lost.
func TestRevokeWhileProclaiming(t *testing.T) {
	pfx := testPrefix(t)
	l := dialLocker(t, srv.Addr(), pfx, ownWatchTTL)
	admin := dialLocker(t, srv.Addr(), pfx, ownWatchTTL)
	ctx := tctx(t, 30*time.Second)
	a := mustTry(t, l, "p", backend.WithValue("0"))
	done := make(chan error, 1)
	wrote := make(chan struct{}, 1)
	go func() {
		for i := 1; ; i++ {
			if err := a.Proclaim(ctx, fmt.Sprint(i)); err != nil {
				done <- err
				return
			}
			select {
			case wrote <- struct{}{}:
			default:
			}
		}
	}()
	for range 3 {
		<-wrote
	}
	found, err := admin.Revoke(ctx, "p", a.Token())
	require.NoError(t, err)
	require.True(t, found)
	select {
	case err := <-done:
		require.ErrorIs(t, err, backend.ErrLeaseLost)
	case <-time.After(10 * time.Second):
		t.Fatal("Proclaim still succeeds after the revocation")
	}
	require.ErrorIs(t, a.Err(), backend.ErrLeaseLost)
}
