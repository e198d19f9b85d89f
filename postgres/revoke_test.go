package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// A waiter promoted by a release and revoked right after (one transaction:
// its Locker's listener gets the grant's notification and the revocation's
// together) never holds the lock as far as its caller knows while the
// server has no holder: its Acquire fails with ErrLeaseLost, or returns a
// grant whose loss signal fires at once, not at its next renewal (TTL/3,
// 10s here). Before the revocation was recorded, Lock returned the grant
// in about a third of the rounds, and another Locker took the lock beside
// it.
func TestRevokedPromotionIsNotAGrant(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	ttl := 30 * time.Second
	la := locker(t, dsn, Config{Prefix: prefix}, backend.WithTTL(ttl))
	lb := locker(t, dsn, Config{Prefix: prefix}, backend.WithTTL(ttl))
	lc := locker(t, dsn, Config{Prefix: prefix}, backend.WithTTL(ttl))
	admin := newPool(t, dsn)
	ctx := tctx(t, 2*time.Minute)
	for i := range 20 {
		name := fmt.Sprintf("n%d", i)
		h, err := la.Acquire(ctx, name)
		require.NoError(t, err)
		ch := goAcquire(ctx, lb, name)
		requireBlocked(t, ch, 100*time.Millisecond)
		// Queued may take more than 100ms on a busy machine: waited for.
		var st backend.Status
		require.Eventually(t, func() bool {
			var err error
			st, err = la.Status(ctx, name)
			return err == nil && len(st.Waiters) == 1
		}, 10*time.Second, 5*time.Millisecond, "round %d: the waiter did not queue", i)
		// The release promotes the waiter (g:<owner>:<token>), the revocation
		// ends its grant (r:<owner>): both notifications at the commit.
		_, err = admin.Exec(ctx, fmt.Sprintf("BEGIN; SELECT %[1]s_release_v1($$%[2]s$$, $$%[3]s$$); "+
			"SELECT %[1]s_revoke_v1($$%[2]s$$, 0, $$%[4]s$$); COMMIT;", prefix, name, st.Holder.ID, st.Waiters[0].ID))
		require.NoError(t, err)
		r := waitAcquired(t, ch, 10*time.Second)
		if r.Err != nil {
			require.ErrorIs(t, r.Err, backend.ErrLeaseLost, "round %d", i)
		} else {
			select {
			case <-r.Lease.Done():
			case <-time.After(2 * time.Second):
				t.Fatalf("round %d: the revoked waiter's Acquire returned a grant (token %d) whose loss signal has not fired 2s later", i, r.Lease.Token())
			}
			require.ErrorIs(t, r.Lease.Err(), backend.ErrLeaseLost, "round %d", i)
			_ = r.Lease.Release(ctx)
		}
		other, err := lc.TryAcquire(ctx, name)
		require.NoError(t, err, "round %d: the revocation left the lock free", i)
		release(t, other)
		_ = h.Release(ctx)
	}
}
