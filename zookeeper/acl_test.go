package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/locktest"
)

// digestConn returns a session of the shared server authenticated as
// user:password (digest), closed at cleanup.
func digestConn(t *testing.T, user, password string) *zk.Conn {
	t.Helper()
	c := srv.Connect(t, 10*time.Second)
	require.NoError(t, c.AddAuth("digest", []byte(user+":"+password)))
	return c
}

// The whole suite runs through the URL form as a digest user with the
// least the documentation asks for: an operator (another identity) created
// the prefix and its parent, the parent closed to everyone else, and gave
// our user CREATE on the prefix and nothing more. Every node below it is
// the adapter's, with our user's ACL alone.
func TestRestrictedUserConformance(t *testing.T) {
	base := testPrefix(t)
	admin := digestConn(t, "admin", "admin-pw")
	openParents(t, admin, base)
	adminOnly := zk.DigestACL(zk.PermAll, "admin", "admin-pw")
	_, err := admin.Create(base, nil, 0, adminOnly)
	require.NoError(t, err)
	prefix := base + "/locks"
	_, err = admin.Create(prefix, nil, 0, append(adminOnly, zk.DigestACL(zk.PermCreate, "app", "app-pw")...))
	require.NoError(t, err)

	u := "zk://app:app-pw@" + srv.Addr() + prefix
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caps, err := conformance.URLCapabilities(ctx, u)
	require.NoError(t, err)
	h, err := conformance.NewURLHarness(u, caps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	conformance.Run(t, h, locktest.RestrictedUserRun()...)

	// Every lock directory the run left is the app user's alone.
	kids, _, err := admin.Children(prefix)
	require.NoError(t, err)
	for _, k := range kids {
		acl, _, err := digestConn(t, "app", "app-pw").GetACL(prefix + "/" + k)
		if err == zk.ErrNoNode {
			continue // a container the server removed meanwhile
		}
		require.NoError(t, err)
		assert.Equal(t, zk.DigestACL(zk.PermAll, "app", "app-pw"), acl, k)
	}
}

// When another identity created the prefix first, with an ACL that leaves
// our user out, every request the Locker makes there is refused with an
// error that matches backend.ErrPermission and keeps the server's message:
// at once, not after a timeout, and never as a held lock or an unreachable
// server.
func TestPrefixOfAnotherIdentity(t *testing.T) {
	pfx := testPrefix(t)
	// Bob's Locker creates the prefix, with his ACL, and holds lock "held".
	bob, err := backend.Open(tctx(t, 30*time.Second), "zk://bob:bob-pw@"+srv.Addr()+pfx)
	require.NoError(t, err)
	defer bob.Close()
	held := mustTry(t, bob, "held")
	defer release(t, held)
	st, err := bob.Status(tctx(t, 10*time.Second), "held")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)

	for _, tc := range []struct{ what, url string }{
		{"another user", "zk://alice:alice-pw@" + srv.Addr() + pfx},
		{"no credentials", "zk://" + srv.Addr() + pfx},
		{"another user, below the prefix", "zk://alice:alice-pw@" + srv.Addr() + pfx + "/sub"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			l, err := backend.Open(tctx(t, 30*time.Second), tc.url)
			require.NoError(t, err)
			defer l.Close()
			const bound = 10 * time.Second // the session timeout; a refusal takes one round trip
			check := func(what string, f func(ctx context.Context) error) {
				t.Helper()
				start := time.Now()
				err := f(tctx(t, 30*time.Second))
				requirePermission(t, err)
				assert.Contains(t, err.Error(), "not authenticated", "the server's message")
				assert.NotContains(t, err.Error(), "-pw", "the error shows a password")
				assert.Less(t, time.Since(start), bound, what)
				t.Logf("%s: %v", what, err)
			}
			check("TryAcquire of a held lock", func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "held"); return err })
			check("Acquire of a held lock", func(ctx context.Context) error { _, err := l.Acquire(ctx, "held"); return err })
			check("TryAcquire of a new lock", func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "new"); return err })
			check("Acquire of a new lock", func(ctx context.Context) error { _, err := l.Acquire(ctx, "new"); return err })
			if tc.what != "another user, below the prefix" {
				check("Status", func(ctx context.Context) error { _, err := l.Status(ctx, "held"); return err })
				check("Revoke", func(ctx context.Context) error { _, err := l.Revoke(ctx, "held", held.Token()); return err })
				check("RevokeID", func(ctx context.Context) error { _, err := l.RevokeID(ctx, "held", st.Holder.ID); return err })
			}
		})
	}
	// Bob still holds his lock.
	require.NoError(t, held.Err())
}

// openParents creates the parent directories of p that are missing, with
// the open ACL the other tests' have (a digest user's Locker would create
// them with its own).
func openParents(t *testing.T, c *zk.Conn, p string) {
	t.Helper()
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			_, err := c.Create(p[:i], nil, 0, zk.WorldACL(zk.PermAll))
			if err != nil {
				require.ErrorIs(t, err, zk.ErrNodeExists)
			}
		}
	}
}

func requirePermission(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, backend.ErrPermission)
	require.NotErrorIs(t, err, backend.ErrNotAcquired)
	require.NotErrorIs(t, err, backend.ErrUnavailable)
}

// A candidate's Proclaim that the server refuses for lack of permission
// (an operator took WRITE away on its node) fails with an error matching
// backend.ErrPermission that keeps the server's message, neither a loss
// nor an unavailable server, and the lease goes on; with WRITE back, it
// stores the value.
func TestProclaimRefused(t *testing.T) {
	pfx := testPrefix(t)
	op := digestConn(t, "app", "app-pw")
	openParents(t, op, pfx)
	l, err := backend.Open(tctx(t, 30*time.Second), "zk://app:app-pw@"+srv.Addr()+pfx)
	require.NoError(t, err)
	defer l.Close()
	ls := mustTry(t, l, "p", backend.WithValue("one"))
	path, _ := nodeOf(t, op, pfx, ls)
	_, err = op.SetACL(path, zk.DigestACL(zk.PermRead|zk.PermDelete|zk.PermAdmin, "app", "app-pw"), -1)
	require.NoError(t, err)

	err = ls.Proclaim(tctx(t, 10*time.Second), "two")
	requirePermission(t, err)
	require.NotErrorIs(t, err, backend.ErrLeaseLost)
	assert.Contains(t, err.Error(), "not authenticated", "the server's message")
	require.NoError(t, ls.Err())
	data, _, err := op.Get(path)
	require.NoError(t, err)
	assert.Equal(t, "one", string(data))

	_, err = op.SetACL(path, zk.DigestACL(zk.PermAll, "app", "app-pw"), -1)
	require.NoError(t, err)
	require.NoError(t, ls.Proclaim(tctx(t, 10*time.Second), "two"))
	data, _, err = op.Get(path)
	require.NoError(t, err)
	assert.Equal(t, "two", string(data))
	release(t, ls)
}
