package locktest

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// ClientClosed checks what a Locker over the caller's own client does when
// the caller closes that client under it (every backend: etcd.New,
// zookeeper.New, redis.New, postgres.New). newLocker returns such a Locker,
// whose leases have TTL ttl, and the function that closes its client;
// other is a Locker with a client of its own, which holds a lock for the
// closed Locker to wait for.
//
// Once the client is closed: the Lease the Locker held is lost within
// ttl/3 and a margin (its next renewal), well before its local deadline,
// with a cause that matches ErrLeaseLost and ErrClientClosed; the Acquire
// that was waiting, Refresh, Release, a new TryAcquire and Acquire, and Status
// return errors matching ErrClientClosed (and ErrUnavailable) without
// waiting for their contexts; Close returns; and no goroutine is left.
func ClientClosed(t *testing.T, other *backend.Locker, ttl time.Duration,
	newLocker func(t *testing.T) (l *backend.Locker, closeClient func())) {
	t.Helper()
	const margin = 2 * time.Second // a busy machine's scheduling
	require.Less(t, ttl/3+margin, ttl, "a TTL too short to tell a prompt loss from the deadline")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, wanted := "closed-held", "closed-wanted"
	blocker, err := other.TryAcquire(ctx, wanted)
	require.NoError(t, err)
	defer func() { _ = blocker.Release(context.Background()) }()
	// Counted once other's goroutines have settled (a holder's watch on
	// its own key starts in the background): what is left beyond this at
	// the end is the closed Locker's or its client's.
	before := settledGoroutines()
	l, closeClient := newLocker(t)
	h, err := l.TryAcquire(ctx, held, backend.WithTTL(ttl))
	require.NoError(t, err)
	type result struct {
		ls  *backend.Lease
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		ls, err := l.Acquire(ctx, wanted, backend.WithTTL(ttl))
		waiting <- result{ls, err}
	}()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := other.Status(ctx, wanted)
		require.NoError(t, err)
		if len(st.Waiters) > 0 {
			break
		}
		require.True(t, time.Now().Before(end), "the Acquire never queued")
	}

	closeClient()
	closed := time.Now()
	closedErr := func(what string, err error) {
		t.Helper()
		require.Error(t, err, what)
		assert.ErrorIs(t, err, backend.ErrClientClosed, what)
		assert.ErrorIs(t, err, backend.ErrUnavailable, what)
		assert.NotErrorIs(t, err, backend.ErrNotAcquired, what)
	}

	select {
	case <-h.Done():
		took := time.Since(closed)
		t.Logf("held lease lost %v after the client was closed (TTL %v)", took, ttl)
		assert.Less(t, took, ttl/3+margin, "the loss waited for the deadline")
		assert.ErrorIs(t, h.Err(), backend.ErrLeaseLost)
		assert.ErrorIs(t, h.Err(), backend.ErrClientClosed)
	case <-time.After(ttl + margin):
		require.Fail(t, "the held lease was never reported lost")
	}
	select {
	case r := <-waiting:
		t.Logf("waiting Acquire returned %v after the client was closed: %v", time.Since(closed), r.err)
		require.Nil(t, r.ls, "granted over a closed client")
		closedErr("waiting Acquire", r.err)
	case <-time.After(ttl + margin):
		require.Fail(t, "the waiting Acquire did not return")
	}
	closedErr("Refresh", h.Refresh(ctx))
	closedErr("Release", h.Release(ctx))
	quick := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		err := f(cctx)
		closedErr(what, err)
		assert.False(t, errors.Is(err, context.DeadlineExceeded), "%s waited for its context: %v", what, err)
		t.Logf("%s: %v after %v", what, err, time.Since(start))
	}
	quick("TryAcquire", func(ctx context.Context) error {
		ls, err := l.TryAcquire(ctx, "closed-other", backend.WithTTL(ttl))
		require.Nil(t, ls)
		return err
	})
	quick("Acquire", func(ctx context.Context) error {
		ls, err := l.Acquire(ctx, "closed-other", backend.WithTTL(ttl))
		require.Nil(t, ls)
		return err
	})
	quick("Status", func(ctx context.Context) error {
		_, err := l.Status(ctx, held)
		return err
	})
	start := time.Now()
	_ = l.Close() // what it could not release is reported; the TTL removes it
	assert.Less(t, time.Since(start), 6*time.Second, "Close")

	for end := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Logf("goroutines: %d before, %d after", before, n)
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines left (%d before):\n%s", n-before, before, buf[:runtime.Stack(buf, true)])
	}
}

// settledGoroutines returns the number of goroutines once it has not
// changed for five samples in a row (10ms apart), or after 5s.
func settledGoroutines() int {
	n, same := runtime.NumGoroutine(), 0
	for end := time.Now().Add(5 * time.Second); same < 5 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}
