package zookeeper

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/locktest"
)

// A holder cut off by a partition (a proxy that holds every byte) loses
// its lease at its local deadline, with ErrDeadline: the session may live
// on in the ensemble until its timeout, which the client cannot know.
func TestLossCausePartitioned(t *testing.T) {
	px, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	defer px.Close()
	l := dialLocker(t, px.Addr(), testPrefix(t), 2*time.Second)
	ls, err := l.TryAcquire(tctx(t, 10*time.Second), "p")
	require.NoError(t, err)
	px.Partition()
	defer px.Heal()
	locktest.PartitionedLossIsDeadline(t, ls)
}
