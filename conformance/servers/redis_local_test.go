package servers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/redis"
)

// The local Redis Sentinel and Sharded topologies: their URLs open,
// Failover promotes another member, which Primary then names, and the URL
// reaches it; the Sharded one's MoveSlot leaves Primary as it was.
func TestLocalRedisTopologies(t *testing.T) {
	for _, topo := range []Topology{Sentinel, Sharded} {
		t.Run(string(topo), func(t *testing.T) {
			t.Parallel()
			s := StartWith(t, Local, Redis, topo)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l, err := backend.Open(ctx, s.URL+"&ttl=3s")
			require.NoError(t, err)
			defer l.Close()
			before, err := s.Primary(ctx)
			require.NoError(t, err)
			ls, err := l.TryAcquire(ctx, "before")
			require.NoError(t, err)
			require.NoError(t, ls.Release(ctx))
			after, err := s.Failover(ctx)
			require.NoError(t, err)
			require.NotEqual(t, before, after)
			now, err := s.Primary(ctx)
			require.NoError(t, err)
			require.Equal(t, after, now)
			require.Eventually(t, func() bool {
				ls, err = l.TryAcquire(ctx, "after")
				return err == nil && ls.Release(ctx) == nil
			}, 30*time.Second, 50*time.Millisecond, "a grant after the failover: %v", err)

			// MoveSlot, while slot 0's lock is held: the holder goes on.
			if topo != Sharded {
				require.ErrorIs(t, s.MoveSlot(ctx, 0), errors.ErrUnsupported)
				return
			}
			ls, err = l.TryAcquire(ctx, "06S")
			require.NoError(t, err)
			require.NoError(t, s.MoveSlot(ctx, 200*time.Millisecond))
			same, err := s.Primary(ctx)
			require.NoError(t, err)
			require.Equal(t, now, same)
			require.NoError(t, ls.Release(ctx))
		})
	}
	_, err := Resolve(Docker, Redis, Sharded)
	require.ErrorContains(t, err, "runs locally only")
	_, err = Resolve(Local, Etcd, Sentinel)
	require.ErrorContains(t, err, "is a Redis topology")
}
