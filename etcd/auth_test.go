package etcd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/locktest"
)

// The least-privilege grant of the package documentation: a role with
// readwrite on the prefix range "locks/" and nothing else, for the URL
// etcd://app:…@host/locks.
var (
	appUser  = etcdtest.User{Name: "app", Password: "app-pw", ReadWrite: []string{"locks/"}}
	noneUser = etcdtest.User{Name: "nobody", Password: "nobody-pw"}
)

// authServer starts a server of its own with authentication on and the
// users appUser and noneUser, and returns it with its host:port.
func authServer(t *testing.T) (*etcdtest.Server, string) {
	t.Helper()
	s := etcdtest.Start(t, etcdtest.WithAuth("root-pw", appUser, noneUser))
	return s, strings.TrimPrefix(s.Endpoints()[0], "http://")
}

// The whole suite runs through the URL form as a user whose role may read
// and write the prefix range "locks/" and nothing else: Open, every
// acquisition, renewal, release, the lease pool, Status, Revoke and
// RevokeID stay within it.
func TestRestrictedUserConformance(t *testing.T) {
	_, host := authServer(t)
	u := "etcd://app:app-pw@" + host + "/locks"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caps, err := conformance.URLCapabilities(ctx, u)
	require.NoError(t, err)
	h, err := conformance.NewURLHarness(u, caps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	conformance.Run(t, h, locktest.RestrictedUserRun()...)
}

// A user without the grant is refused at Open, at once, with an error that
// matches backend.ErrPermission and says so: not "cannot reach", not
// ErrUnavailable. So is the granted user on a prefix outside its range, and
// a wrong password.
func TestOpenWithoutGrant(t *testing.T) {
	_, host := authServer(t)
	const dialTimeout = 20 * time.Second
	for _, tc := range []struct{ what, url string }{
		{"user without grant", "etcd://nobody:nobody-pw@" + host + "/locks"},
		{"prefix outside the grant", "etcd://app:app-pw@" + host + "/other"},
		{"prefix lock, not locks", "etcd://app:app-pw@" + host + "/lock"},
		{"wrong password", "etcd://app:wrong@" + host + "/locks"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			start := time.Now()
			l, err := backend.Open(tctx(t, 30*time.Second), tc.url+"?dial_timeout="+dialTimeout.String())
			took := time.Since(start)
			if l != nil {
				_ = l.Close()
			}
			require.ErrorIs(t, err, backend.ErrPermission)
			assert.NotErrorIs(t, err, backend.ErrUnavailable)
			assert.NotContains(t, err.Error(), "cannot reach")
			assert.Contains(t, err.Error(), "etcdserver:")
			assert.NotContains(t, err.Error(), "-pw", "the error shows a password")
			assert.NotContains(t, err.Error(), "wrong", "the error shows a password")
			// Well under dial_timeout, on a busy machine too.
			assert.Less(t, took, dialTimeout/2)
			t.Logf("%v: %v", took, err)
		})
	}
}

// Over a client of its own (New), a Locker on a prefix outside the user's
// grant reports every refused request as backend.ErrPermission: not as a
// held lock, not as an unreachable cluster.
func TestRequestsWithoutGrant(t *testing.T) {
	s, _ := authServer(t)
	c, err := s.ClientAs(appUser.Name, appUser.Password)
	require.NoError(t, err)
	defer c.Close()
	l, err := New(c, Config{Prefix: "other"})
	require.NoError(t, err)
	defer l.Close()
	ctx := tctx(t, 30*time.Second)

	_, err = l.TryAcquire(ctx, "n")
	requirePermission(t, err)
	_, err = l.Acquire(ctx, "n")
	requirePermission(t, err)
	_, err = l.Status(ctx, "n")
	requirePermission(t, err)
	_, err = l.Revoke(ctx, "n", 1)
	requirePermission(t, err)
	_, err = l.RevokeID(ctx, "n", "other/n/1@1")
	requirePermission(t, err)
}

func requirePermission(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, backend.ErrPermission)
	require.NotErrorIs(t, err, backend.ErrNotAcquired)
	require.NotErrorIs(t, err, backend.ErrUnavailable)
}

// A waiter whose role loses its grant while it waits ends its wait with
// backend.ErrPermission once it is refused (here: its read when the waiter
// ahead of it releases), rather than retrying until its context ends and
// reporting a held lock, or losing its lease at the TTL. (The waiter next
// in line takes its turn on its predecessor's deletion without a read, so
// it would learn of the loss at its first request as the holder.)
func TestWaitRefused(t *testing.T) {
	root, holderLocker, waiterLocker, _ := refusalLockers(t)
	held, err := holderLocker.TryAcquire(tctx(t, 10*time.Second), "n")
	require.NoError(t, err)
	next := goAcquire(tctx(t, 60*time.Second), holderLocker, "n")
	waitKeys(t, root, "locks", "n", 2)
	ch := goAcquire(tctx(t, 60*time.Second), waiterLocker, "n")
	waitKeys(t, root, "locks", "n", 3)
	requireBlocked(t, ch, 300*time.Millisecond)
	ctx := tctx(t, 10*time.Second)
	_, err = root.RoleRevokePermission(ctx, appUser.Name, "locks/", clientv3.GetPrefixRangeEnd("locks/"))
	require.NoError(t, err)
	release(t, held)
	r := waitAcquired(t, next, 20*time.Second)
	require.NoError(t, r.Err)
	release(t, r.Lease)
	r = waitAcquired(t, ch, 20*time.Second)
	requirePermission(t, r.Err)
}

// A waiter queued right behind the holder takes its turn on the holder's
// deletion without a read, so a role that lost its grant meanwhile is
// granted the lock (exclusion holds: its key is the oldest) and learns of
// the loss at its first request as the holder: its Release is refused with
// backend.ErrPermission.
func TestNextWaiterRefusedAfterTurn(t *testing.T) {
	root, holderLocker, waiterLocker, d := refusalLockers(t)
	held, err := holderLocker.TryAcquire(tctx(t, 10*time.Second), "n")
	require.NoError(t, err)
	ch := goAcquire(tctx(t, 60*time.Second), waiterLocker, "n")
	// Both its reads done (when it queued, and at its watch's creation):
	// it waits for the holder's deletion alone.
	require.Eventually(t, func() bool { return d.reads.Load() == 2 }, 20*time.Second, time.Millisecond)
	requireBlocked(t, ch, 100*time.Millisecond)
	ctx := tctx(t, 10*time.Second)
	_, err = root.RoleRevokePermission(ctx, appUser.Name, "locks/", clientv3.GetPrefixRangeEnd("locks/"))
	require.NoError(t, err)
	release(t, held)
	r := waitAcquired(t, ch, 20*time.Second)
	require.NoError(t, r.Err)
	assert.Greater(t, r.Lease.Token(), held.Token())
	requirePermission(t, r.Lease.Release(ctx))
}

// A candidate of the restricted user proclaims (one Txn on its own key,
// within the grant), and a concurrency.Election of the same user reads the
// value.
func TestRestrictedUserProclaim(t *testing.T) {
	s, _ := authServer(t)
	c, err := s.ClientAs(appUser.Name, appUser.Password)
	require.NoError(t, err)
	defer c.Close()
	l, err := New(c, Config{Prefix: "locks"}, backend.WithTTL(30*time.Second))
	require.NoError(t, err)
	defer l.Close()
	ctx := tctx(t, 30*time.Second)

	h, err := l.Acquire(ctx, "n", backend.WithValue("a"))
	require.NoError(t, err)
	require.NoError(t, h.Proclaim(ctx, "b"))
	st, err := l.Status(ctx, "n")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "b", st.Holder.Value)
	assert.Equal(t, h.Token(), st.Holder.Token)
	sess, err := concurrency.NewSession(c, concurrency.WithTTL(30))
	require.NoError(t, err)
	defer sess.Close()
	resp, err := concurrency.NewElection(sess, "locks/n").Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "b", string(resp.Kvs[0].Value))
	time.Sleep(2 * ownWatchDelay) // the watch of its key sees the put
	require.NoError(t, h.Err())
	release(t, h)
}

// refusalLockers starts an etcd server with auth on and returns its root
// client, a Locker of root's (the holder's) and one of appUser's (the
// waiter's, whose role the tests revoke) with its driver, all on prefix
// "locks" and closed when the test ends.
func refusalLockers(t *testing.T) (root *clientv3.Client, holder, waiter *backend.Locker, d *etcdDriver) {
	t.Helper()
	s, _ := authServer(t)
	root = s.NewClient(t)
	app, err := s.ClientAs(appUser.Name, appUser.Password)
	require.NoError(t, err)
	t.Cleanup(func() { app.Close() })
	holder, err = New(root, Config{Prefix: "locks"})
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close() })
	d = newDriver(app, "locks", false)
	waiter, err = backend.New(d, backend.WithTTL(30*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { waiter.Close() })
	return root, holder, waiter, d
}
