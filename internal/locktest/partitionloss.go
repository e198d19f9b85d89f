package locktest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// PartitionedLossIsDeadline checks a held lease ls whose Locker a
// partition has just cut off (nothing passes, nothing is closed): its loss
// signal fires, and its error names the one cause a cut-off holder can
// know, backend.ErrDeadline, and no other.
func PartitionedLossIsDeadline(t testing.TB, ls *backend.Lease) {
	t.Helper()
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no loss signal")
	}
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, ls.Err(), backend.ErrDeadline)
	for _, other := range []error{backend.ErrRevoked, backend.ErrDeleted, backend.ErrExpired, backend.ErrSessionLost} {
		require.NotErrorIs(t, ls.Err(), other)
	}
}
