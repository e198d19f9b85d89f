package locktest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// RevokeID checks Locker.RevokeID on one backend, with the ids Status shows:
// holder takes lock name and two waiters (each through a Locker of
// waiters) queue behind it; revoking the first waiter fails its Acquire
// with ErrLeaseLost within prompt and touches nobody else; an id revoked
// already is not found; revoking the holder fires its loss signal within
// lost and grants the lock to the second waiter. holder's TTL must outlast
// the test, and give the lock key a life longer than prompt where a waiter
// would try again when it could have expired.
func RevokeID(t testing.TB, holder, admin *backend.Locker, waiters [2]*backend.Locker, name string, prompt, lost time.Duration) {
	t.Helper()
	ctx := Ctx(t, 30*time.Second+lost)
	held, err := holder.Acquire(ctx, name)
	require.NoError(t, err)
	var chs [2]<-chan Result
	var st backend.Status
	for i, w := range waiters {
		chs[i] = Go(ctx, w, name)
		require.Eventually(t, func() bool {
			st, err = admin.Status(ctx, name)
			return err == nil && len(st.Waiters) == i+1
		}, 10*time.Second, 10*time.Millisecond, "waiter %d queued", i+1)
	}
	require.NotNil(t, st.Holder)
	assert.Equal(t, held.Token(), st.Holder.Token)
	ids := map[string]bool{st.Holder.ID: true, st.Waiters[0].ID: true, st.Waiters[1].ID: true}
	assert.Len(t, ids, 3, "every acquisition has an id of its own: %+v", st)
	assert.NotContains(t, ids, "", "every acquisition has an id: %+v", st)

	start := time.Now()
	found, err := admin.RevokeID(ctx, name, st.Waiters[0].ID)
	require.NoError(t, err)
	require.True(t, found, "the first waiter, %q", st.Waiters[0].ID)
	r := Wait(t, chs[0], 10*time.Second)
	require.Nil(t, r.Lease, "a revoked waiter must not be granted")
	require.ErrorIs(t, r.Err, backend.ErrLeaseLost)
	assert.Less(t, time.Since(start), prompt, "the revoked waiter gave up late")
	require.NoError(t, held.Err(), "revoking a waiter must not touch the holder")
	RequireBlocked(t, chs[1], 100*time.Millisecond)
	found, err = admin.RevokeID(ctx, name, st.Waiters[0].ID)
	require.NoError(t, err)
	assert.False(t, found, "an id revoked already")

	found, err = admin.RevokeID(ctx, name, st.Holder.ID)
	require.NoError(t, err)
	require.True(t, found, "the holder, %q", st.Holder.ID)
	select {
	case <-held.Done():
	case <-time.After(lost):
		require.FailNowf(t, "not told", "the revoked holder's loss signal did not fire within %v", lost)
	}
	require.ErrorIs(t, held.Err(), backend.ErrLeaseLost)
	r = Wait(t, chs[1], 10*time.Second)
	require.NoError(t, r.Err, "the second waiter, once the holder was revoked")
	assert.Greater(t, r.Lease.Token(), held.Token())
	Release(t, r.Lease)
}
