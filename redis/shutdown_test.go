package redis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
)

// A Locker whose waiter's pub/sub connection is being dialled when the
// network goes (the proxy holds new connections: the dial is accepted and
// never answered) still shuts down soon after Shutdown's context ends.
// Before, Shutdown waited for the subscription's dial and handshake, which
// go-redis holds its lock over: 5s past a 300ms context (found by the
// conformance suite's ClosePartitioned/Shutdown on a loaded machine).
func TestShutdownWhileSubscribing(t *testing.T) {
	p, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	defer p.Close()
	ctx := tctx(t, time.Minute)
	prefix := testPrefix(t)
	l, err := backend.Open(ctx, "redis://"+p.Addr()+"/0?prefix="+prefix+"&ttl=10s")
	require.NoError(t, err)
	defer l.Close()
	holder := locker(t, srv.Addr(), Config{Prefix: prefix}, backend.WithTTL(10*time.Second))
	held, err := holder.TryAcquire(ctx, "x")
	require.NoError(t, err)
	defer release(t, held)
	warm, err := l.TryAcquire(ctx, "warm") // a pooled connection for the wait's scripts
	require.NoError(t, err)
	release(t, warm)

	p.HoldNew()
	ch := goAcquire(ctx, l, "x") // queues, then dials its pub/sub connection
	require.Eventually(t, func() bool {
		st, err := holder.Status(ctx, "x")
		return err == nil && len(st.Waiters) == 1
	}, 30*time.Second, 10*time.Millisecond, "the waiter did not queue")
	time.Sleep(200 * time.Millisecond) // its subscription dials meanwhile

	sctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = l.Shutdown(sctx)
	took := time.Since(start)
	require.Less(t, took, 2*time.Second, "Shutdown of a 300ms context took %v", took)
	r := waitAcquired(t, ch, 5*time.Second)
	require.ErrorIs(t, r.Err, backend.ErrClosed)
	p.Heal()
}
