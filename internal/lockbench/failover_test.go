package lockbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/internal/lockbench"
)

// memFailover is an election on a mem server whose candidates are killed
// by cutting their connection (as the conformance harness's Crash does),
// and a Locker of the same server that observes it.
func memFailover(t *testing.T, ttl time.Duration) (lockbench.Failover, *backend.Locker) {
	srv := mem.NewServer()
	observer, err := mem.New(srv.Connect())
	require.NoError(t, err)
	t.Cleanup(func() { _ = observer.Close() })
	return lockbench.Failover{
		TTL: ttl,
		Waiting: func(ctx context.Context) (bool, error) {
			st, err := observer.Status(ctx, "leader")
			return len(st.Waiters) > 0, err
		},
		New: func(tb testing.TB) lockbench.Candidate {
			conn := srv.Connect()
			l, err := mem.New(conn, backend.WithTTL(ttl))
			require.NoError(tb, err)
			e, err := election.New(l)
			require.NoError(tb, err)
			return lockbench.ElectionCandidate(e, "leader", "v", conn.Cut, func() { _ = l.Close() })
		},
	}, observer
}

// TestRunFailovers: both ends hand the election to the waiting candidate,
// one failover each time, and leave no leader behind.
func TestRunFailovers(t *testing.T) {
	for _, end := range []lockbench.End{lockbench.Resign, lockbench.Kill} {
		t.Run(string(end), func(t *testing.T) {
			f, observer := memFailover(t, 300*time.Millisecond)
			starts, stops := 0, 0
			ds := lockbench.RunFailovers(t, f, end, 3, func() { starts++ }, func() { stops++ })
			require.Len(t, ds, 3)
			require.Equal(t, 3, starts)
			require.Equal(t, 3, stops)
			for _, d := range ds {
				require.Positive(t, d)
			}
			st, err := observer.Status(context.Background(), "leader")
			require.NoError(t, err)
			require.Nil(t, st.Holder)
			require.Empty(t, st.Waiters)
		})
	}
}
