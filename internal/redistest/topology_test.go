package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A 3+3 cluster serves keys of every master through a cluster client, and
// a forced failover moves a slot to the old master's replica.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := c.NewClient(t)
	masters := map[*Server]bool{}
	for i := range 30 {
		key := fmt.Sprint("k", i)
		require.NoError(t, cc.Set(ctx, key, i, 0).Err())
		m, err := c.MasterOf(ctx, key)
		require.NoError(t, err)
		masters[m] = true
	}
	require.Len(t, masters, 3, "30 keys spread over the three masters")

	m, err := c.MasterOf(ctx, "k0")
	require.NoError(t, err)
	r, err := c.ReplicaOf(ctx, m)
	require.NoError(t, err)
	require.NoError(t, c.Failover(ctx, r, true))
	require.NoError(t, poll(ctx, func(ctx context.Context) error {
		now, err := c.MasterOf(ctx, "k0")
		if err == nil && now != r {
			err = fmt.Errorf("k0 on %s", now.Addr())
		}
		return err
	}))
	require.NoError(t, poll(ctx, func(ctx context.Context) error { return cc.Set(ctx, "k0", "after", 0).Err() }))
}

// Sentinels name the primary, and SENTINEL FAILOVER promotes the replica.
func TestSentinels(t *testing.T) {
	t.Parallel()
	s := StartSentinels(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := s.Master(ctx)
	require.NoError(t, err)
	require.Equal(t, s.Primary, m)
	now, err := s.Failover(ctx)
	require.NoError(t, err)
	require.Equal(t, s.Replica, now)
}
