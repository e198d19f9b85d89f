package backend_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
)

func TestNewRejectsBadDefaults(t *testing.T) {
	conn := mem.NewServer().Connect()
	_, err := mem.New(conn, backend.WithTTL(0))
	assert.ErrorIs(t, err, backend.ErrInvalidOption)
	_, err = mem.New(conn, backend.WithTTL(time.Second), backend.WithDriftMargin(-time.Millisecond))
	assert.ErrorIs(t, err, backend.ErrInvalidOption)
}

// The deadline is send time + TTL - margin, where the default margin is 1% of
// TTL plus 5ms, never more than TTL/10.
func TestDeadlineWithinTTLOfSend(t *testing.T) {
	ctx := context.Background()
	l, err := mem.New(mem.NewServer().Connect())
	require.NoError(t, err)
	defer l.Close()
	for _, ttl := range []time.Duration{200 * time.Millisecond, time.Second, time.Minute} {
		before := time.Now()
		lease, err := l.Acquire(ctx, "d", backend.WithTTL(ttl))
		require.NoError(t, err)
		after := time.Now()
		margin := min(ttl/100+5*time.Millisecond, ttl/10)
		assert.False(t, lease.Deadline().Before(before.Add(ttl-margin)), "deadline earlier than send + TTL - margin")
		assert.False(t, lease.Deadline().After(after.Add(ttl-margin)), "deadline later than send + TTL - margin")
		assert.True(t, lease.Deadline().After(after), "deadline already passed")
		require.NoError(t, lease.Release(ctx))
	}
}

func TestMetadataOptionDoesNotAlias(t *testing.T) {
	conn := mem.NewServer().Connect()
	base := map[string]string{"a": "1"}
	l, err := mem.New(conn, backend.WithMetadata(base))
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Acquire(context.Background(), "m", backend.WithMetadata(map[string]string{"b": "2"}))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1"}, base, "a per-acquire option changed the caller's map")
}
