package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/zktest"
)

// driverLocker dials a driver and a Locker over it, for tests that reach
// into the driver's sessions.
func driverLocker(t testing.TB, cfg Config, opts ...backend.Option) (*zkDriver, *backend.Locker) {
	t.Helper()
	d, err := dialDriver(tctx(t, 30*time.Second), cfg, nil)
	require.NoError(t, err)
	l, err := backend.New(d, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return d, l
}

// The token is the czxid of the acquisition's node, which is named like
// Curator's and zk.Lock's protected nodes and carries the holder.
func TestTokenIsCzxidOfProtectedNode(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	l := dialLocker(t, srv.Addr(), pfx, 4*time.Second, backend.WithHolder("me"))
	var last int64
	for i := range 3 {
		ls, err := l.Acquire(tctx(t, 10*time.Second), "t")
		require.NoError(t, err)
		path, st := nodeOf(t, admin, pfx, ls)
		assert.Equal(t, int64(ls.Token()), st.Czxid)
		assert.Greater(t, st.Czxid, last, "acquisition %d", i)
		last = st.Czxid
		assert.Regexp(t, regexp.MustCompile(`^`+regexp.QuoteMeta(pfx)+`/t/_c_[0-9a-f]{32}-lock-\d{10}$`), path)
		assert.Equal(t, st.EphemeralOwner != 0, true, "ephemeral")
		data, _, err := admin.Get(path)
		require.NoError(t, err)
		var v nodeValue
		require.NoError(t, json.Unmarshal(data, &v))
		assert.Equal(t, "me", v.Holder)
		release(t, ls)
		assert.Empty(t, lockNodes(t, admin, pfx, "t"))
	}
}

// The default TTL is the negotiated session timeout; TTLs the server will
// not grant as asked are refused with ErrInvalidOption, naming what it
// grants.
func TestTTLIsNegotiatedSessionTimeout(t *testing.T) {
	pfx := testPrefix(t)
	l := dialLocker(t, srv.Addr(), pfx, 3*time.Second)
	ls, err := l.TryAcquire(tctx(t, 10*time.Second), "x")
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, ls.TTL())
	release(t, ls)

	_, err = l.TryAcquire(tctx(t, 10*time.Second), "x", backend.WithTTL(zktest.MaxSessionTimeout+time.Second))
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	assert.Contains(t, err.Error(), "granted "+zktest.MaxSessionTimeout.String())
	_, err = l.TryAcquire(tctx(t, 10*time.Second), "x", backend.WithTTL(2500*time.Microsecond*1000+time.Microsecond))
	require.ErrorIs(t, err, backend.ErrInvalidOption, "not whole milliseconds")

	// A server that raises a short timeout: Dial takes what it grants as
	// the default TTL.
	s := zktest.Start(t, zktest.WithConfig("minSessionTimeout", "1500"))
	l2 := dialLocker(t, s.Addr(), pfx, time.Second)
	ls, err = l2.TryAcquire(tctx(t, 10*time.Second), "x")
	require.NoError(t, err)
	assert.Equal(t, 1500*time.Millisecond, ls.TTL())
	release(t, ls)
	_, err = l2.TryAcquire(tctx(t, 10*time.Second), "x", backend.WithTTL(time.Second))
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	assert.Contains(t, err.Error(), "granted 1.5s")

	// From a URL: session_timeout alone is the default TTL, as granted.
	for u, want := range map[string]time.Duration{
		"zk://" + srv.Addr() + pfx + "?session_timeout=3s": 3 * time.Second,
		"zk://" + s.Addr() + pfx + "?session_timeout=1s":   1500 * time.Millisecond,
	} {
		lu, err := backend.Open(tctx(t, 10*time.Second), u)
		require.NoError(t, err, u)
		ls, err = lu.TryAcquire(tctx(t, 10*time.Second), "u")
		require.NoError(t, err, u)
		assert.Equal(t, want, ls.TTL(), u)
		release(t, ls)
		require.NoError(t, lu.Close())
	}
}

// A session that expires while holding: the loss signal fires (long before
// the TTL would), Release reports the loss, and the next acquisition runs
// in a new session.
func TestSessionExpiryWhileHolding(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	d, l := driverLocker(t, Config{Servers: []string{srv.Addr()}, Prefix: pfx, SessionTimeout: 30 * time.Second})
	ls, err := l.Acquire(tctx(t, 10*time.Second), "e")
	require.NoError(t, err)
	conn := d.sessions[30*time.Second].conn
	oldID := conn.SessionID()
	waitNodes(t, admin, pfx, "e", 1)

	expireSession(t, srv.Addr(), conn)
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("no loss signal within 10s of the session expiry (TTL 30s)")
	}
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, ls.Err(), backend.ErrSessionLost, "the loss names its cause")
	require.NotErrorIs(t, ls.Err(), backend.ErrDeleted)
	assert.Regexp(t, `its session ended: session 0x[0-9a-f]+ expired`, ls.Err().Error(), "the cause says why")
	waitNodes(t, admin, pfx, "e", 0)
	require.ErrorIs(t, ls.Release(tctx(t, 10*time.Second)), backend.ErrLeaseLost)

	ls2, err := l.Acquire(tctx(t, 20*time.Second), "e")
	require.NoError(t, err)
	assert.NotEqual(t, oldID, conn.SessionID(), "a new session")
	_, st := nodeOf(t, admin, pfx, ls2)
	assert.Equal(t, conn.SessionID(), st.EphemeralOwner, "the new node belongs to the new session")
	assert.Greater(t, ls2.Token(), ls.Token())
	release(t, ls2)
}

// The same over a caller's Conn (New), whose events the adapter does not
// see: it notices the session change by polling, and a waiter is told too.
func TestSessionExpiryGivenConn(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	conn := srv.Connect(t, 20*time.Second)
	_, err := New(conn, Config{Prefix: pfx, SessionTimeout: 5 * time.Second, User: "u"})
	require.ErrorIs(t, err, backend.ErrInvalidOption, "Dial's settings on a caller's Conn")
	require.ErrorContains(t, err, "SessionTimeout, User configure Dial's sessions")
	_, err = New(nil, Config{})
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	l, err := New(conn, Config{Prefix: pfx})
	require.NoError(t, err)
	defer l.Close()
	other := dialLocker(t, srv.Addr(), pfx, 20*time.Second)

	held, err := l.Acquire(tctx(t, 10*time.Second), "g")
	require.NoError(t, err)
	assert.Equal(t, 20*time.Second, held.TTL())
	holder, err := other.Acquire(tctx(t, 10*time.Second), "w")
	require.NoError(t, err)
	waiting := goAcquire(tctx(t, 30*time.Second), l, "w")
	waitNodes(t, admin, pfx, "w", 2)

	expireSession(t, srv.Addr(), conn)
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("no loss signal within 10s of the session expiry")
	}
	require.ErrorIs(t, held.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, held.Err(), backend.ErrSessionLost, "the loss names its cause")
	r := waitAcquired(t, waiting, 10*time.Second)
	require.ErrorIs(t, r.Err, backend.ErrLeaseLost, "a waiter of an expired session")
	require.ErrorIs(t, r.Err, backend.ErrSessionLost, "a waiter of an expired session")
	release(t, holder)

	_, err = l.TryAcquire(tctx(t, 10*time.Second), "g", backend.WithTTL(5*time.Second))
	require.ErrorIs(t, err, backend.ErrInvalidOption, "only the Conn's timeout")
}

// The connection drops while the create is in flight and its reply is lost:
// the node is found by its guid, and there is exactly one. Both creates
// are checked: the Multi, and the plain create that follows a wait.
func TestConnectionDropDuringCreate(t *testing.T) {
	for _, waited := range []bool{false, true} {
		t.Run(fmt.Sprintf("after_wait=%v", waited), func(t *testing.T) { testConnectionDropDuringCreate(t, waited) })
	}
}

func testConnectionDropDuringCreate(t *testing.T, waited bool) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	p := zktest.NewProxy(t, srv.Addr())
	l := dialLocker(t, p.Addr(), pfx, 6*time.Second)
	primeCreate(t, l, pfx, "d", waited)

	p.DropReplies(true)
	ch := goAcquire(tctx(t, 30*time.Second), l, "d")
	nodes := waitNodes(t, admin, pfx, "d", 1) // applied, reply lost
	p.Cut()
	p.DropReplies(false)
	r := waitAcquired(t, ch, 20*time.Second)
	require.NoError(t, r.Err)
	after := lockNodes(t, admin, pfx, "d")
	require.Equal(t, nodes, after, "exactly the one node")
	_, st := nodeOf(t, admin, pfx, r.Lease)
	assert.Equal(t, int64(r.Lease.Token()), st.Czxid)
	release(t, r.Lease)
	waitNodes(t, admin, pfx, "d", 0)
}

func mustTry(t testing.TB, l *backend.Locker, name string, opts ...backend.Option) *backend.Lease {
	t.Helper()
	ls, err := l.TryAcquire(tctx(t, 10*time.Second), name, opts...)
	require.NoError(t, err)
	return ls
}

// Tokens keep growing across a server restart, and across the lock
// directory being deleted and re-created (when the sequence suffix restarts
// from 0, which is why it is not the token).
func TestTokenIncreasesAcrossRestart(t *testing.T) {
	s := zktest.Start(t)
	pfx := testPrefix(t)
	const sessionTimeout = 10 * time.Second
	l := dialLocker(t, s.Addr(), pfx, sessionTimeout)
	ls := mustTry(t, l, "r")
	t1 := ls.Token()
	release(t, ls)

	require.NoError(t, s.Restart())
	ls = acquireAfterRestart(t, l, "r", sessionTimeout)
	t2 := ls.Token()
	release(t, ls)
	assert.Greater(t, t2, t1)

	// The directory is a container node: the server deletes it itself once
	// it has been empty for a check interval (1s on the test server), which
	// on a busy machine may already have happened.
	admin := s.Connect(t, 10*time.Second)
	if err := admin.Delete(lockDir(pfx, "r"), -1); !errors.Is(err, zk.ErrNoNode) {
		require.NoError(t, err)
	}
	l2 := dialLocker(t, s.Addr(), pfx, 10*time.Second)
	ls = mustTry(t, l2, "r")
	path, _ := nodeOf(t, admin, pfx, ls)
	assert.True(t, strings.HasSuffix(path, "-lock-0000000000"), "the sequence restarted: %s", path)
	assert.Greater(t, ls.Token(), t2, "the token did not")
	release(t, ls)
}

// acquireAfterRestart acquires name with l, whose Conn (of sessionTimeout)
// was connected to a server that just restarted, once the Conn has a
// session again: the old one if it reconnected in time, else a new one.
// On a busy machine the Conn can reconnect while the restarted server is
// starting and get no answer to its handshake: the Acquire then waits
// (seen: 30s in StateConnected, in a few runs in a hundred with three or
// four runs at once beside busy loops), and go-zookeeper gives up on the
// handshake only after 10 receive timeouts (2/3 of the session timeout
// each: 67s at 10s); it then fails the requests it holds with
// zk.ErrNoServer, an Acquire with backend.ErrUnavailable, as the contract
// says (the caller may try again), and reconnects. So an Acquire that
// fails as unavailable is made again, within that and 30s more.
func acquireAfterRestart(t *testing.T, l *backend.Locker, name string, sessionTimeout time.Duration) *backend.Lease {
	t.Helper()
	deadline := time.Now().Add(10*sessionTimeout*2/3 + 30*time.Second)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		ls, err := l.Acquire(ctx, name)
		cancel()
		if err == nil {
			return ls
		}
		require.ErrorIs(t, err, backend.ErrUnavailable)
		require.True(t, time.Now().Before(deadline), "no grant after the restart: %v", err)
		t.Logf("after the restart: %v; again", err)
		time.Sleep(100 * time.Millisecond)
	}
}

func mustAcquire(t testing.TB, l *backend.Locker, name string, d time.Duration, opts ...backend.Option) *backend.Lease {
	t.Helper()
	ls, err := l.Acquire(tctx(t, d), name, opts...)
	require.NoError(t, err)
	return ls
}

// Children of the lock directory that are not lock nodes are ignored
// (go-zookeeper PR #44: zk.Lock fails on them).
func TestNonLockChildrenIgnored(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	l := dialLocker(t, srv.Addr(), pfx, 4*time.Second)
	release(t, mustTry(t, l, "n")) // creates the directory
	dir := lockDir(pfx, "n")
	for _, c := range []string{"config", "lock-", "x-lock-abc", "lock-12a", "_c_zz-lock"} {
		_, err := admin.Create(dir+"/"+c, []byte("x"), 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err, c)
	}
	a := mustTry(t, l, "n")
	_, err := l.TryAcquire(tctx(t, 10*time.Second), "n")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	ch := goAcquire(tctx(t, 20*time.Second), l, "n")
	requireBlocked(t, ch, 300*time.Millisecond)
	release(t, a)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	release(t, r.Lease)
}

// An Acquire of a free lock is one request, the Multi: its Stat shows our
// node alone in the directory, so no getChildren follows. With another
// child there (a waiter, or a node that is not a lock) it reads the
// children.
func TestFreeLockIsOneRequest(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	d, l := driverLocker(t, Config{Servers: []string{srv.Addr()}, Prefix: pfx, SessionTimeout: 4 * time.Second})
	for i := range 2 {
		before := d.childReads.Load()
		ls, err := l.Acquire(tctx(t, 10*time.Second), "n")
		require.NoError(t, err)
		assert.Equal(t, before, d.childReads.Load(), "getChildren requests of acquisition %d of a free lock", i)
		release(t, ls)
	}
	_, err := admin.Create(lockDir(pfx, "n")+"/config", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	before := d.childReads.Load()
	ls, err := l.Acquire(tctx(t, 10*time.Second), "n")
	require.NoError(t, err)
	release(t, ls)
	assert.Equal(t, before+1, d.childReads.Load(), "getChildren requests with another child in the directory")
}

// inLine is lock "n" under prefix pfx, held by A (acquired with opts, by
// locker) with B, then C, waiting; B's wait ends with cancelB. reads counts
// C's getChildren requests.
type inLine struct {
	pfx      string
	locker   *backend.Locker
	held     *backend.Lease
	chB, chC <-chan acquired
	cancelB  context.CancelFunc
	reads    func() int64
}

func threeInLine(t *testing.T, opts ...backend.Option) inLine {
	pfx := testPrefix(t)
	cfg := Config{Servers: []string{srv.Addr()}, Prefix: pfx, SessionTimeout: 4 * time.Second}
	_, la := driverLocker(t, cfg)
	_, lb := driverLocker(t, cfg)
	dc, lc := driverLocker(t, cfg)
	ctx := tctx(t, 20*time.Second)
	q := inLine{pfx: pfx, locker: la, held: mustTry(t, la, "n", opts...), reads: dc.childReads.Load}
	var bctx context.Context
	bctx, q.cancelB = context.WithCancel(ctx)
	t.Cleanup(q.cancelB)
	// Each waiter is waited for until it is queued and C has checked the
	// queue: 200ms may not be enough on a busy machine, where C could then
	// queue ahead of B or not have read the children yet.
	waiters := func(n int) func() bool {
		return func() bool { st, err := la.Status(ctx, "n"); return err == nil && len(st.Waiters) == n }
	}
	q.chB = goAcquire(bctx, lb, "n")
	requireBlocked(t, q.chB, 200*time.Millisecond)
	require.Eventually(t, waiters(1), 10*time.Second, 5*time.Millisecond, "B did not queue")
	q.chC = goAcquire(ctx, lc, "n")
	requireBlocked(t, q.chC, 200*time.Millisecond)
	require.Eventually(t, waiters(2), 10*time.Second, 5*time.Millisecond, "C did not queue")
	require.Eventually(t, func() bool { return q.reads() >= 1 }, 10*time.Second, 5*time.Millisecond, "C did not check the queue")
	require.Equal(t, int64(1), q.reads(), "C's first check of the queue")
	return q
}

// A waiter whose predecessor was the holder takes over when the
// predecessor's node goes, without reading the children again; one whose
// predecessor was a waiter that left reads them and waits on.
func TestHandoffWithoutReread(t *testing.T) {
	q := threeInLine(t)
	q.cancelB() // C's predecessor goes, but the holder is still ahead
	r := waitAcquired(t, q.chB, 5*time.Second)
	require.Error(t, r.Err)
	requireBlocked(t, q.chC, 300*time.Millisecond)
	require.Equal(t, int64(2), q.reads(), "C read the children after its predecessor, a waiter, left")

	release(t, q.held) // now the holder, the only node ahead of C, goes
	r = waitAcquired(t, q.chC, 5*time.Second)
	require.NoError(t, r.Err)
	require.Equal(t, int64(2), q.reads(), "C took over from the holder without reading the children")
	release(t, r.Lease)
}

// A waiter two places back watches the holder too: when the holder goes it
// knows the predecessor is alone ahead, and when the predecessor goes it
// takes over, all without reading the children again.
func TestHandoffTwoBackWithoutReread(t *testing.T) {
	q := threeInLine(t)
	release(t, q.held)
	rb := waitAcquired(t, q.chB, 5*time.Second)
	require.NoError(t, rb.Err)
	requireBlocked(t, q.chC, 300*time.Millisecond)
	release(t, rb.Lease)
	rc := waitAcquired(t, q.chC, 5*time.Second)
	require.NoError(t, rc.Err)
	require.Equal(t, int64(1), q.reads(), "C read the children after its first check")
	release(t, rc.Lease)
}

// Holders of go-zookeeper's zk.Lock and of this package on the same path
// exclude each other, both ways; the prefix may be several levels deep
// (what a chroot would be for a Java client), created as needed.
func TestInteropWithZkLock(t *testing.T) {
	pfx := testPrefix(t) + "/chroot/app"
	l := dialLocker(t, srv.Addr(), pfx, 4*time.Second)
	conn := srv.Connect(t, 10*time.Second)
	zl := zk.NewLock(conn, lockDir(pfx, "i"), zk.WorldACL(zk.PermAll))

	// zk.Lock first: we wait.
	require.NoError(t, zl.Lock())
	_, err := l.TryAcquire(tctx(t, 10*time.Second), "i")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	ch := goAcquire(tctx(t, 20*time.Second), l, "i")
	requireBlocked(t, ch, 300*time.Millisecond)
	require.NoError(t, zl.Unlock())
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)

	// We hold: zk.Lock waits.
	zdone := make(chan error, 1)
	go func() { zdone <- zl.Lock() }()
	select {
	case err := <-zdone:
		t.Fatalf("zk.Lock returned while we hold: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	release(t, r.Lease)
	select {
	case err := <-zdone:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("zk.Lock not granted after our release")
	}
	require.NoError(t, zl.Unlock())
}

// A waiter whose context ends leaves no node, also when its create was in
// flight.
func TestCancelWhileWaitingLeavesNoNode(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	a := dialLocker(t, srv.Addr(), pfx, 4*time.Second)
	b := dialLocker(t, srv.Addr(), pfx, 4*time.Second)
	held := mustTry(t, a, "c")
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*time.Millisecond)
		_, err := b.Acquire(ctx, "c")
		cancel()
		// Held (queued) or no answer yet (the create in flight).
		require.ErrorIs(t, err, context.DeadlineExceeded)
		if !errors.Is(err, backend.ErrUnavailable) {
			require.ErrorIs(t, err, backend.ErrNotAcquired)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := goAcquire(ctx, b, "c")
	waitNodes(t, admin, pfx, "c", 2)
	cancel()
	r := waitAcquired(t, ch, 10*time.Second)
	require.ErrorIs(t, r.Err, context.Canceled)
	waitNodes(t, admin, pfx, "c", 1)
	release(t, held)
	waitNodes(t, admin, pfx, "c", 0)
}

// With digest credentials, every node the Locker creates is auth:PermAll:
// a client without them can neither delete a lock node (ZooKeeper checks
// DELETE on the parent) nor read it nor queue under it; one with the same
// credentials sees the lock held.
func TestDigestACL(t *testing.T) {
	pfx := testPrefix(t)
	cfg := Config{Servers: []string{srv.Addr()}, Prefix: pfx, SessionTimeout: 4 * time.Second, User: "alice", Password: "s3cret"}
	l, err := Dial(tctx(t, 10*time.Second), cfg)
	require.NoError(t, err)
	defer l.Close()
	ls := mustTry(t, l, "a")

	authed := srv.Connect(t, 10*time.Second)
	require.NoError(t, authed.AddAuth("digest", []byte("alice:s3cret")))
	path, _ := nodeOf(t, authed, pfx, ls)
	acl, _, err := authed.GetACL(path)
	require.NoError(t, err)
	require.Equal(t, zk.DigestACL(zk.PermAll, "alice", "s3cret"), acl)

	anon := srv.Connect(t, 10*time.Second)
	require.ErrorIs(t, anon.Delete(path, -1), zk.ErrNoAuth)
	_, _, err = anon.Get(path)
	require.ErrorIs(t, err, zk.ErrNoAuth)

	mallory, err := Dial(tctx(t, 10*time.Second), Config{Servers: []string{srv.Addr()}, Prefix: pfx, SessionTimeout: 4 * time.Second, User: "mallory", Password: "x"})
	require.NoError(t, err)
	defer mallory.Close()
	_, err = mallory.Acquire(tctx(t, 10*time.Second), "a")
	require.Error(t, err)
	require.True(t, errors.Is(err, zk.ErrNoAuth), "%v", err)

	l2, err := Dial(tctx(t, 10*time.Second), cfg)
	require.NoError(t, err)
	defer l2.Close()
	_, err = l2.TryAcquire(tctx(t, 10*time.Second), "a")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	release(t, ls)
	release(t, mustTry(t, l2, "a"))
}

// Names map to one escaped path segment each: nothing traverses or
// collides, and ZooKeeper accepts them all.
func TestNamesAreOneSegment(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	l := dialLocker(t, srv.Addr(), pfx, 4*time.Second)
	names := []string{"a/b", "a%2Fb", "%2F", "..", ".", "...", "/", "%", "a b", "zookeeper", "日本", "_c_x-lock-1", "x\u200by", "\ufff0", "a\\b"}
	var held []*backend.Lease
	for _, n := range names {
		ls := mustTry(t, l, n)
		held = append(held, ls)
	}
	kids, _, err := admin.Children(pfx)
	require.NoError(t, err)
	assert.Len(t, kids, len(names), "one directory per name, all directly under the prefix: %v", kids)
	for _, n := range names {
		seg := escapeName(n)
		assert.NotContains(t, seg, "/")
		assert.NotEqual(t, ".", seg)
		assert.NotEqual(t, "..", seg)
		assert.Contains(t, kids, seg)
	}
	assert.Equal(t, "a%2Fb", escapeName("a/b"))
	assert.Equal(t, "a%252Fb", escapeName("a%2Fb"))
	assert.Equal(t, "%2E%2E", escapeName(".."))
	for _, ls := range held {
		release(t, ls)
	}
}

// Lease.Suspended reports a dropped connection without firing the loss
// signal; the lease survives a reconnect within its session.
func TestSuspendedIsNotLost(t *testing.T) {
	pfx := testPrefix(t)
	p := zktest.NewProxy(t, srv.Addr())
	l := dialLocker(t, p.Addr(), pfx, 8*time.Second)
	ls := mustTry(t, l, "s")
	susp, changed := ls.Suspended()
	require.False(t, susp)

	p.Kill()
	select {
	case <-changed:
	case <-time.After(8 * time.Second):
		t.Fatal("no suspension noticed")
	}
	susp, changed = ls.Suspended()
	require.True(t, susp)
	require.NoError(t, ls.Err(), "suspended is not lost")
	p.Revive()
	select {
	case <-changed:
	case <-time.After(8 * time.Second):
		t.Fatal("no reconnect noticed")
	}
	susp, _ = ls.Suspended()
	require.False(t, susp)
	require.NoError(t, ls.Refresh(tctx(t, 5*time.Second)))
	require.NoError(t, ls.Err())
	release(t, ls)
}

// A waiter whose node is deleted by someone else (an operator, a
// revocation) just before its predecessor goes must fail with
// ErrLeaseLost, never be granted: it takes over without reading the
// children, so it must learn of its own node's deletion first. Both nodes
// go in one transaction, at every moment of the waiter's setting up (its
// first read, its watches), over many rounds.
func TestWaiterNodeDeletedBeforePredecessor(t *testing.T) {
	pfx := testPrefix(t)
	la := dialLocker(t, srv.Addr(), pfx, 4*time.Second)
	lb := dialLocker(t, srv.Addr(), pfx, 4*time.Second)
	raw := srv.Connect(t, 10*time.Second)
	for round := 0; round < 30; round++ {
		ctx := tctx(t, 20*time.Second)
		held := mustTry(t, la, "n")
		ch := goAcquire(ctx, lb, "n")
		var nodes []string
		require.Eventually(t, func() bool {
			nodes = lockNodes(t, raw, pfx, "n")
			return len(nodes) == 2
		}, 5*time.Second, time.Millisecond)
		// Delay the deletion by a different amount each round, to land
		// before, between and after the waiter's watches are set.
		time.Sleep(time.Duration(round%10) * time.Millisecond)
		dir := lockDir(pfx, "n")
		_, err := raw.Multi(
			&zk.DeleteRequest{Path: dir + "/" + nodes[1], Version: -1},
			&zk.DeleteRequest{Path: dir + "/" + nodes[0], Version: -1},
		)
		require.NoError(t, err)
		r := waitAcquired(t, ch, 10*time.Second)
		require.Nil(t, r.Lease, "round %d: a waiter without a node was granted the lock", round)
		require.ErrorIs(t, r.Err, backend.ErrLeaseLost, "round %d", round)
		_ = held.Release(ctx) // its node is gone: an error is expected
	}
}

// After an acquisition that waited, the next acquisition of that lock by
// the same Locker creates its node with a plain create, not the Multi (the
// directory's version, which the Multi's setData bumps, stays put), and
// still returns its node's czxid: from the watch on its node when it waits,
// from one read when it finds the lock free after all. An acquisition that
// did not wait puts the next one back on the Multi.
func TestContendedCreateIsPlain(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	cfg := Config{Servers: []string{srv.Addr()}, Prefix: pfx, SessionTimeout: 4 * time.Second}
	_, la := driverLocker(t, cfg)
	_, lb := driverLocker(t, cfg)
	dir := lockDir(pfx, "n")
	dirVersion := func() int32 {
		_, st, err := admin.Get(dir)
		require.NoError(t, err)
		return st.Version
	}
	ctx := tctx(t, 30*time.Second)
	waitBehind := func(multi bool) *backend.Lease {
		t.Helper()
		held := mustAcquire(t, la, "n", 10*time.Second)
		v := dirVersion()
		ch := goAcquire(ctx, lb, "n")
		requireBlocked(t, ch, 200*time.Millisecond)
		if multi {
			assert.Equal(t, v+1, dirVersion(), "a first contended acquisition uses the Multi")
		} else {
			assert.Equal(t, v, dirVersion(), "after a wait, a plain create")
		}
		release(t, held)
		r := waitAcquired(t, ch, 5*time.Second)
		require.NoError(t, r.Err)
		_, st := nodeOf(t, admin, pfx, r.Lease)
		assert.Equal(t, int64(r.Lease.Token()), st.Czxid)
		assert.Greater(t, r.Lease.Token(), held.Token())
		return r.Lease
	}
	release(t, waitBehind(true))
	release(t, waitBehind(false))

	// Free after all: a plain create, then a read of the czxid.
	v := dirVersion()
	ls := mustAcquire(t, lb, "n", 10*time.Second)
	assert.Equal(t, v, dirVersion(), "after a wait, a plain create even when the lock is free")
	_, st := nodeOf(t, admin, pfx, ls)
	assert.Equal(t, int64(ls.Token()), st.Czxid)
	release(t, ls)

	// That acquisition did not wait: the next one uses the Multi again.
	ls = mustAcquire(t, lb, "n", 10*time.Second)
	assert.Equal(t, v+1, dirVersion(), "after an acquisition that did not wait, the Multi")
	release(t, ls)
}

// primeCreate acquires and releases name once with l, so that l's next
// Acquire of name creates its node with a plain create (waited: that
// acquisition waited behind another Locker's hold) or with the Multi; it
// also leaves l's session with a fresh proof of life, so that the next
// NewLease sends nothing.
func primeCreate(t *testing.T, l *backend.Locker, pfx, name string, waited bool) {
	t.Helper()
	if !waited {
		release(t, mustTry(t, l, name))
		return
	}
	other := dialLocker(t, srv.Addr(), pfx, 6*time.Second)
	release(t, acquireAfter(t, l, name, mustTry(t, other, name)))
}

// acquireAfter starts an Acquire of name with l, checks that it waits
// while held holds the lock, releases held, and returns the waiter's lease.
func acquireAfter(t *testing.T, l *backend.Locker, name string, held *backend.Lease) *backend.Lease {
	t.Helper()
	ch := goAcquire(tctx(t, 10*time.Second), l, name)
	requireBlocked(t, ch, 200*time.Millisecond)
	release(t, held)
	r := waitAcquired(t, ch, 5*time.Second)
	require.NoError(t, r.Err)
	return r.Lease
}

// Where the client may create and delete in the lock directory but not
// write it, the Multi (whose setData writes it) is refused, and a plain
// create takes its place: the token is still the node's czxid, whether the
// acquisition waits or not.
func TestDirectoryWithoutWrite(t *testing.T) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	_, err := admin.Create(pfx, nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	_, err = admin.Create(lockDir(pfx, "w"), nil, 0, zk.WorldACL(zk.PermRead|zk.PermCreate|zk.PermDelete))
	require.NoError(t, err)
	la := dialLocker(t, srv.Addr(), pfx, 4*time.Second)
	lb := dialLocker(t, srv.Addr(), pfx, 4*time.Second)

	held := mustTry(t, la, "w")
	_, st := nodeOf(t, admin, pfx, held)
	assert.Equal(t, int64(held.Token()), st.Czxid)
	next := acquireAfter(t, lb, "w", held)
	_, st = nodeOf(t, admin, pfx, next)
	assert.Equal(t, int64(next.Token()), st.Czxid)
	assert.Greater(t, next.Token(), held.Token())
	release(t, next)
	waitNodes(t, admin, pfx, "w", 0)
}
