package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// The basics on one database: a grant with a token, a waiter woken by the
// release notification (not its timer) with a larger token, a TryAcquire
// refused while held, and Status.
func TestAcquireWaitRelease(t *testing.T) {
	dsn := srv.NewDatabase(t)
	la := locker(t, dsn, Config{}, backend.WithTTL(10*time.Second))
	lb := locker(t, dsn, Config{}, backend.WithTTL(10*time.Second))
	ctx := tctx(t, 30*time.Second)

	ls, err := la.TryAcquire(ctx, "n", backend.WithHolder("a"), backend.WithMetadata(map[string]string{"k": "v"}))
	require.NoError(t, err)
	_, err = lb.TryAcquire(ctx, "n")
	require.ErrorIs(t, err, backend.ErrNotAcquired)

	ch := goAcquire(ctx, lb, "n", backend.WithHolder("b"))
	requireBlocked(t, ch, 200*time.Millisecond)
	st, err := la.Status(ctx, "n")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	require.Equal(t, "a", st.Holder.Holder)
	require.Equal(t, map[string]string{"k": "v"}, st.Holder.Metadata)
	require.Equal(t, ls.Token(), st.Holder.Token)
	require.Len(t, st.Waiters, 1)
	require.Equal(t, "b", st.Waiters[0].Holder)

	start := time.Now()
	release(t, ls)
	r := waitAcquired(t, ch, 5*time.Second)
	require.NoError(t, r.Err)
	require.Less(t, time.Since(start), 2*time.Second, "woken by the notification, not the fallback timer")
	require.Greater(t, r.Lease.Token(), ls.Token())
	release(t, r.Lease)
}
