package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// A least-privileged user: refused as ErrPermission (never as held) until
// it has the grants the package documentation lists, and then everything
// works (election candidates and Proclaim too), its Locker finding the
// schema current without migrating; a
// Locker of that user that would have to migrate fails in Open with
// ErrPermission.
func TestLeastPrivilege(t *testing.T) {
	dsn := srv.NewDatabase(t)
	admin := newPool(t, dsn)
	ctx := tctx(t, 60*time.Second)
	const p = "fl_acl"
	require.NoError(t, Migrate(ctx, admin, p))
	role := "fl_app_" + strings.TrimPrefix(testPrefix(t), "fl_")
	_, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = admin.Exec(ctx, "DROP ROLE "+role)
	})
	appDSN := strings.Replace(dsn, "postgres@", role+"@", 1)

	_, err = backend.Open(ctx, appDSN+"&prefix=fl_acl_other")
	require.ErrorIs(t, err, backend.ErrPermission, "migrating without CREATE")

	la, err := backend.Open(ctx, appDSN+"&prefix="+p)
	require.NoError(t, err, "the schema is current: nothing to migrate")
	defer la.Close()
	_, err = la.TryAcquire(ctx, "n")
	require.ErrorIs(t, err, backend.ErrPermission)
	require.NotErrorIs(t, err, backend.ErrNotAcquired)
	require.ErrorContains(t, err, "42501")

	for _, grant := range []string{
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + p + "_locks, " + p + "_waiters TO " + role,
		"GRANT USAGE ON SEQUENCE " + p + "_queue TO " + role,
	} {
		_, err := admin.Exec(ctx, grant)
		require.NoError(t, err, grant)
	}
	lb, err := backend.Open(ctx, appDSN+"&prefix="+p)
	require.NoError(t, err)
	defer lb.Close()
	ls, err := la.TryAcquire(ctx, "n")
	require.NoError(t, err)
	ch := goAcquire(ctx, lb, "n")
	requireBlocked(t, ch, 200*time.Millisecond)
	require.NoError(t, ls.Refresh(ctx))
	st, err := lb.Status(ctx, "n")
	require.NoError(t, err)
	require.Len(t, st.Waiters, 1)
	release(t, ls)
	r := waitAcquired(t, ch, 5*time.Second)
	require.NoError(t, r.Err)
	found, err := la.Revoke(ctx, "n", r.Lease.Token())
	require.NoError(t, err)
	require.True(t, found)

	lv, err := la.Acquire(ctx, "e", backend.WithValue("a1"))
	require.NoError(t, err)
	ch = goAcquire(ctx, lb, "e", backend.WithValue("b1"))
	st = requireWaiter(t, la, "e", ch)
	require.Equal(t, "b1", st.Waiters[0].Value)
	require.NoError(t, lv.Proclaim(ctx, "a2"))
	st, err = lb.Status(ctx, "e")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	require.Equal(t, "a2", st.Holder.Value)
	release(t, lv)
	r = waitAcquired(t, ch, 5*time.Second)
	require.NoError(t, r.Err)
	require.NoError(t, r.Lease.Proclaim(ctx, "b2"))
	release(t, r.Lease)
}
