package backend_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
)

// A value is checked before anything reaches the backend, and replaces the
// holder identity and metadata, even when they are the Locker's defaults.
func TestWithValue(t *testing.T) {
	ctx := context.Background()
	srv := mem.NewServer()
	l, err := mem.New(srv.Connect(), backend.WithHolder("worker-1"), backend.WithMetadata(map[string]string{"k": "v"}))
	require.NoError(t, err)
	defer l.Close()
	for _, bad := range []string{"a\x00b", "\xff", strings.Repeat("x", backend.MaxValueLen+1)} {
		_, err := l.Acquire(ctx, "v", backend.WithValue(bad))
		require.ErrorIs(t, err, backend.ErrInvalidOption)
		require.Zero(t, srv.Queued("v"), "a refused value reached the backend")
	}
	lease, err := l.Acquire(ctx, "v", backend.WithValue(strings.Repeat("é", backend.MaxValueLen/2)))
	require.NoError(t, err)
	require.Empty(t, lease.Holder())
	st, err := l.Status(ctx, "v")
	require.NoError(t, err)
	require.Equal(t, lease.Value(), st.Holder.Value)
	require.Empty(t, st.Holder.Holder)
	require.Empty(t, st.Holder.Metadata)

	require.ErrorIs(t, lease.Proclaim(ctx, "\x00"), backend.ErrInvalidOption)
	require.NoError(t, lease.Proclaim(ctx, ""))
	require.Equal(t, "", lease.Value())
	st, err = l.Status(ctx, "v")
	require.NoError(t, err)
	require.Equal(t, "", st.Holder.Value)
	require.Equal(t, lease.Token(), st.Holder.Token)
	require.NoError(t, lease.Release(ctx))
	require.ErrorIs(t, lease.Proclaim(ctx, "late"), backend.ErrReleased)
}

// Proclaim is for leases acquired with a value.
func TestProclaimNeedsValue(t *testing.T) {
	ctx := context.Background()
	l, err := mem.New(mem.NewServer().Connect())
	require.NoError(t, err)
	defer l.Close()
	lease, err := l.Acquire(ctx, "p")
	require.NoError(t, err)
	defer lease.Release(ctx)
	require.ErrorIs(t, lease.Proclaim(ctx, "x"), backend.ErrInvalidOption)
	require.Empty(t, lease.Value())
	require.NotEmpty(t, lease.Holder())
}
