package etcd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
)

// A Release whose request dies with its connection (the member the client
// talked to crashed before the request got through) is asked again on a
// new connection, so the lock is free at once rather than after its TTL
// (found by the chaos campaign: an etcd follower killed under a holder).
// The proxy holds the request, then drops the connection with it undelivered.
func TestReleaseRetriedAfterConnectionDied(t *testing.T) {
	px, err := faultproxy.Start(strings.TrimPrefix(srv.Endpoints()[0], "http://"))
	require.NoError(t, err)
	defer px.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + px.Addr()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer c.Close()
	pfx := testPrefix(t)
	a, err := New(c, Config{Prefix: pfx}, backend.WithTTL(long))
	require.NoError(t, err)
	defer a.Close()
	b := locker(t, pfx)

	la, err := a.Acquire(tctx(t, 10*time.Second), "r")
	require.NoError(t, err)
	px.Partition()
	released := make(chan error, 1)
	go func() { released <- la.Release(tctx(t, 20*time.Second)) }()
	time.Sleep(answerDelay) // the Release's request is held in the proxy
	px.Drop()
	px.Heal()
	require.NoError(t, <-released, "Release asked again on a new connection")
	lb, err := b.TryAcquire(tctx(t, 10*time.Second), "r")
	require.NoError(t, err, "the lock is free at once, not after its TTL (%v)", long)
	require.NoError(t, lb.Release(context.Background()))
}
