// Package locktest holds the small helpers the adapters' tests share:
// acquiring in the background, waiting for the result, and bounded contexts.
package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// Result is what a background Acquire returned.
type Result struct {
	Lease *backend.Lease // nil if Err is set
	Err   error          // Acquire's error
}

// Go runs l.Acquire in the background; its result arrives on the channel.
func Go(ctx context.Context, l *backend.Locker, name string, opts ...backend.Option) <-chan Result {
	ch := make(chan Result, 1)
	go func() {
		ls, err := l.Acquire(ctx, name, opts...)
		ch <- Result{ls, err}
	}()
	return ch
}

// Wait returns the result from ch, failing t if none arrives within d.
func Wait(t testing.TB, ch <-chan Result, d time.Duration) Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		require.FailNowf(t, "timeout", "no Acquire result within %v", d)
		return Result{}
	}
}

// RequireBlocked fails t if a result arrives on ch within d.
func RequireBlocked(t testing.TB, ch <-chan Result, d time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		require.FailNowf(t, "not blocked", "Acquire returned while it should wait: lease %v err %v", r.Lease != nil, r.Err)
	case <-time.After(d):
	}
}

// Release releases ls within 10s and fails t on an error.
func Release(t testing.TB, ls *backend.Lease) {
	t.Helper()
	require.NoError(t, ls.Release(Ctx(t, 10*time.Second)))
}

// Ctx returns a context that ends after d or with the test.
func Ctx(t testing.TB, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// RequireUnavailableWhenServerGone has holder take the lock called name
// and waiter queue behind it, then stops their server with stop, and
// requires that the wait, given up when its context ends, returns an error
// matching backend.ErrUnavailable and the context's error, not
// backend.ErrNotAcquired: the server's last word was "held", but who holds
// the lock is unknown once it stopped answering. It shuts both Lockers
// down without waiting for clean-ups that a stopped server cannot answer.
func RequireUnavailableWhenServerGone(t testing.TB, holder, waiter *backend.Locker, name string, stop func(), opts ...backend.Option) {
	t.Helper()
	_, err := holder.TryAcquire(Ctx(t, 10*time.Second), name, opts...)
	require.NoError(t, err)
	ch := Go(Ctx(t, 4*time.Second), waiter, name, opts...)
	RequireBlocked(t, ch, 500*time.Millisecond)
	stop()
	r := Wait(t, ch, 20*time.Second)
	require.ErrorIs(t, r.Err, backend.ErrUnavailable)
	require.ErrorIs(t, r.Err, context.DeadlineExceeded)
	require.NotErrorIs(t, r.Err, backend.ErrNotAcquired)
	for _, l := range []*backend.Locker{holder, waiter} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = l.Shutdown(ctx)
		cancel()
	}
}
