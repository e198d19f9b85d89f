package backend_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

// stuckDriver is a backend whose calls can be made to hang as a client
// that does not heed its context hangs on a partitioned connection, or to
// answer as a queued wait does.
type stuckDriver struct {
	mu       sync.Mutex
	lock     string // "grant", "held", "queued" (waits for ctx, then ErrNotAcquired), "silent" (waits for ctx, no answer)
	hangKA   bool   // KeepAlive blocks, ignoring its ctx, until unstuck
	silentKA bool   // KeepAlive blocks until its ctx ends: no answer, as through a partition
	hangRel  bool   // Release blocks until its ctx ends
	hangCl   bool   // Shutdown blocks until its ctx ends
	unstuck  chan struct{}
	closed   bool
	inFlight atomic.Int32 // KeepAlive calls hanging
	locking  atomic.Int32 // Lock calls in flight
	// relInLock counts Release calls made while a Lock was in flight,
	// which driver.Lease rules out.
	relInLock atomic.Int32
}

func newStuckDriver() *stuckDriver { return &stuckDriver{lock: "grant", unstuck: make(chan struct{})} }

func (d *stuckDriver) set(f func(d *stuckDriver)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d)
}

func (d *stuckDriver) Capabilities() driver.Capabilities {
	return driver.Capabilities{MinTTL: 10 * time.Millisecond}
}

func (d *stuckDriver) CheckTTL(time.Duration) error { return nil }

func (d *stuckDriver) Inspect(context.Context, string) (driver.Status, error) {
	return driver.Status{}, errors.ErrUnsupported
}

func (d *stuckDriver) Revoke(context.Context, string, fencing.Token) (bool, error) {
	return false, errors.ErrUnsupported
}

func (d *stuckDriver) RevokeID(context.Context, string, string) (bool, error) {
	return false, errors.ErrUnsupported
}

func (d *stuckDriver) NewLease(ctx context.Context, req driver.Request) (driver.Lease, time.Time, error) {
	return &stuckLease{d: d}, time.Now(), nil
}

func (d *stuckDriver) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	hang := d.hangCl
	d.closed = true
	d.mu.Unlock()
	if hang {
		<-ctx.Done()
		return fmt.Errorf("%w: stuck: close: %w", backend.ErrUnavailable, ctx.Err())
	}
	return nil
}

type stuckLease struct{ d *stuckDriver }

var errStuckNet = errors.New("stuck: i/o timeout")

func (l *stuckLease) Lock(ctx context.Context, wait bool) (driver.Grant, error) {
	l.d.locking.Add(1)
	defer l.d.locking.Add(-1)
	l.d.mu.Lock()
	mode := l.d.lock
	l.d.mu.Unlock()
	switch mode {
	case "held":
		return driver.Grant{}, fmt.Errorf("%w: stuck: held", backend.ErrNotAcquired)
	case "queued":
		<-ctx.Done()
		// A driver takes a moment to wind its wait down (a request in
		// flight, bounded by ctx): Release must not overtake it.
		time.Sleep(50 * time.Millisecond)
		return driver.Grant{}, fmt.Errorf("%w: stuck: %w", backend.ErrNotAcquired, ctx.Err())
	case "silent":
		<-ctx.Done()
		return driver.Grant{}, fmt.Errorf("stuck: %w (%w)", errStuckNet, ctx.Err())
	}
	return driver.Grant{Token: 1}, nil
}

func (l *stuckLease) KeepAlive(ctx context.Context) (time.Time, error) {
	sent := time.Now()
	l.d.mu.Lock()
	hang, silent := l.d.hangKA, l.d.silentKA
	l.d.mu.Unlock()
	if silent {
		<-ctx.Done()
		return time.Time{}, fmt.Errorf("%w: stuck: %w (%w)", backend.ErrUnavailable, errStuckNet, ctx.Err())
	}
	if hang {
		l.d.inFlight.Add(1)
		defer l.d.inFlight.Add(-1)
		<-l.d.unstuck // ignores ctx, as go-redis without ContextTimeoutEnabled does
		return time.Time{}, fmt.Errorf("%w: stuck: %w", backend.ErrUnavailable, errStuckNet)
	}
	return sent, nil
}

func (l *stuckLease) Release(ctx context.Context, _ bool) error {
	if l.d.locking.Load() > 0 {
		l.d.relInLock.Add(1)
	}
	l.d.mu.Lock()
	hang := l.d.hangRel
	l.d.mu.Unlock()
	if hang {
		<-ctx.Done()
		return fmt.Errorf("%w: stuck: release: %w", backend.ErrUnavailable, ctx.Err())
	}
	return nil
}

func (l *stuckLease) Suspended() (bool, <-chan struct{}) { return false, nil }

// lossTolerance is how late the loss signal may fire after the deadline:
// nominally a timer's latency (well under 1ms); the bound leaves room for a
// loaded two-core machine with the race detector on, and is still well
// below a renewal period (TTL/3 of the test's 1.5s), which is when the
// signal fired before the deadline had a timer of its own (if it fired at
// all: it waited for the hung renewal).
const lossTolerance = 200 * time.Millisecond

// A renewal that hangs, ignoring its context, does not hold up the loss
// signal: it fires at the local deadline, with a cause that says the
// backend did not answer (ErrUnavailable); and Release does not wait for
// the renewal past its own context.
func TestLossAtDeadlineWhileRenewalHangs(t *testing.T) {
	d := newStuckDriver()
	l, err := backend.New(d)
	require.NoError(t, err)
	defer l.Close()
	const ttl = 1500 * time.Millisecond
	ls, err := l.TryAcquire(context.Background(), "stuck", backend.WithTTL(ttl))
	require.NoError(t, err)
	d.set(func(d *stuckDriver) { d.hangKA = true })
	deadline := ls.Deadline()

	select {
	case <-ls.Done():
	case <-time.After(ttl + time.Second):
		require.FailNow(t, "no loss signal", "a second past a %v TTL", ttl)
	}
	late := time.Since(deadline)
	t.Logf("loss signal %v after the deadline", late)
	assert.GreaterOrEqual(t, late, time.Duration(0), "fired before the deadline")
	assert.Less(t, late, lossTolerance, "the loss signal fired %v after the deadline", late)
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, ls.Err(), backend.ErrUnavailable, "a renewal in flight at the deadline got no answer")

	rctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = ls.Release(rctx)
	assert.Less(t, time.Since(start), 100*time.Millisecond+lossTolerance, "Release waited for the hung renewal")

	close(d.unstuck)
	require.Eventually(t, func() bool { return d.inFlight.Load() == 0 }, time.Second, time.Millisecond)
}

// A waiter lost while its Lock is in flight (its renewals got no answer
// until the deadline) is released by the failed acquisition once Lock has
// returned, never while Lock runs, as driver.Lease promises its drivers:
// an adapter's Lock may still be writing the state that Release reads.
// (A driver stands in for a backend here: only it can tell the order of
// the calls a real one receives.)
func TestLostWaiterReleasedAfterLock(t *testing.T) {
	d := newStuckDriver()
	d.set(func(d *stuckDriver) { d.lock, d.silentKA = "queued", true })
	l, err := backend.New(d)
	require.NoError(t, err)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = l.Acquire(ctx, "waiter", backend.WithTTL(300*time.Millisecond))
	require.ErrorIs(t, err, backend.ErrLeaseLost, "the deadline ended the wait")
	require.Eventually(t, func() bool { return d.locking.Load() == 0 }, time.Second, time.Millisecond)
	time.Sleep(100 * time.Millisecond) // a background release would have run by now
	assert.Zero(t, d.relInLock.Load(), "Release was called while Lock was in flight")
}

// The renewal's own error stays in the chain of the loss cause: a lease
// lost because the backend was unreachable matches ErrUnavailable too.
func TestLossCauseKeepsRenewalError(t *testing.T) {
	d := newStuckDriver()
	close(d.unstuck) // KeepAlive fails at once
	l, err := backend.New(d)
	require.NoError(t, err)
	defer l.Close()
	// A TTL long enough that a renewal is tried before the deadline on a
	// loaded machine (at 200ms, the deadline sometimes came first).
	ls, err := l.TryAcquire(context.Background(), "fails", backend.WithTTL(time.Second))
	require.NoError(t, err)
	d.set(func(d *stuckDriver) { d.hangKA = true })
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no loss signal")
	}
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, ls.Err(), backend.ErrUnavailable)
	require.ErrorIs(t, ls.Err(), errStuckNet)
}

// ErrNotAcquired means held, ErrUnavailable means no answer: a driver that
// says the lock is held (or that the wait was queued) gives ErrNotAcquired;
// a context that ends before the driver answered gives ErrUnavailable, with
// the client's error and the context's in the chain.
func TestUnansweredIsUnavailable(t *testing.T) {
	d := newStuckDriver()
	l, err := backend.New(d)
	require.NoError(t, err)
	defer l.Close()
	try := func(mode string, wait bool) error {
		d.set(func(d *stuckDriver) { d.lock = mode })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		var ls *backend.Lease
		var err error
		if wait {
			ls, err = l.Acquire(ctx, "n")
		} else {
			ls, err = l.TryAcquire(ctx, "n")
		}
		require.Nil(t, ls)
		return err
	}

	err = try("held", false)
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.NotErrorIs(t, err, backend.ErrUnavailable)

	for _, wait := range []bool{false, true} {
		err = try("silent", wait)
		require.ErrorIs(t, err, backend.ErrUnavailable, "wait %v", wait)
		require.NotErrorIs(t, err, backend.ErrNotAcquired, "wait %v", wait)
		require.ErrorIs(t, err, context.DeadlineExceeded, "wait %v", wait)
		require.ErrorIs(t, err, errStuckNet, "wait %v: the client's error", wait)
	}

	err = try("queued", true)
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, backend.ErrUnavailable)
}

// Shutdown returns soon after its context ends even when the backend does
// not answer releases or the driver's close, and leaves no goroutine
// behind; Close is bounded the same way, by 5s.
func TestShutdownBounded(t *testing.T) {
	before := runtime.NumGoroutine()
	d := newStuckDriver()
	l, err := backend.New(d)
	require.NoError(t, err)
	for _, n := range []string{"a", "b", "c"} {
		_, err := l.TryAcquire(context.Background(), n, backend.WithTTL(time.Minute))
		require.NoError(t, err)
	}
	d.set(func(d *stuckDriver) { d.hangRel, d.hangCl = true, true })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Shutdown(ctx)
	took := time.Since(start)
	t.Logf("Shutdown took %v: %v", took, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, 200*time.Millisecond+500*time.Millisecond, "room for a loaded machine; the stuck driver alone would take a minute")
	require.NoError(t, l.Close(), "Close after Shutdown")
	// Polled here: testify's Eventually runs its condition on a goroutine
	// of its own.
	for end := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			buf := make([]byte, 1<<20)
			require.FailNowf(t, "goroutines left behind", "were %d, now:\n%s", before, buf[:runtime.Stack(buf, true)])
		}
	}
}

// A Refresh in flight that gets no answer (its caller's context has no
// deadline) does not hold up Release or Shutdown: the lease's end cancels
// it.
func TestShutdownWhileRefreshUnanswered(t *testing.T) {
	d := newStuckDriver()
	l, err := backend.New(d)
	require.NoError(t, err)
	ls, err := l.TryAcquire(context.Background(), "r", backend.WithTTL(time.Minute))
	require.NoError(t, err)
	d.set(func(d *stuckDriver) { d.silentKA = true })
	refreshed := make(chan error, 1)
	go func() { refreshed <- ls.Refresh(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // the Refresh is in the driver

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Shutdown(ctx)
	took := time.Since(start)
	t.Logf("Shutdown took %v: %v", took, err)
	assert.Less(t, took, 200*time.Millisecond+500*time.Millisecond, "Shutdown waited for the unanswered Refresh")
	select {
	case err := <-refreshed:
		require.Error(t, err)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the Refresh is still in flight after Shutdown")
	}
}

func (l *stuckLease) Proclaim(context.Context, string) error { return nil }

// No "renewal failed, retrying" line is logged once the loss was: a
// renewal in flight at the local deadline (no answer, as through a
// partition) fails after the loss was reported, and is not retried.
// Failures before the loss are logged as retries, before the loss line.
func TestNoRetryLoggedAfterLoss(t *testing.T) {
	d := newStuckDriver()
	close(d.unstuck) // a hung KeepAlive fails at once
	logs := &recordingHandler{}
	l, err := backend.New(d, backend.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	defer l.Close()
	ls, err := l.TryAcquire(context.Background(), "cut", backend.WithTTL(900*time.Millisecond))
	require.NoError(t, err)
	d.set(func(d *stuckDriver) { d.hangKA = true }) // renewals fail at once
	require.Eventually(t, func() bool { return len(logs.find("fencelock: renewal failed, retrying")) > 0 },
		10*time.Second, time.Millisecond, "no failed renewal logged")
	d.set(func(d *stuckDriver) { d.silentKA = true }) // the next one gets no answer until the deadline
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no loss signal")
	}
	// Release waits for the renewal in flight: its failure is in by now.
	_ = ls.Release(context.Background())
	require.ErrorIs(t, ls.Err(), backend.ErrDeadline)

	logs.mu.Lock()
	var msgs []string
	for _, r := range logs.records {
		msgs = append(msgs, r.Message)
	}
	logs.mu.Unlock()
	lost := slices.Index(msgs, "fencelock: lease lost")
	require.GreaterOrEqual(t, lost, 1, "log lines: %q", msgs)
	assert.NotContains(t, msgs[lost+1:], "fencelock: renewal failed, retrying", "log lines: %q", msgs)
	assert.Contains(t, msgs[:lost], "fencelock: renewal failed, retrying")
}

// With auto-renew off, a lease whose Refresh failed (no answer) and that
// reaches its deadline is lost with ErrDeadline: a renewal was asked for.
// One never refreshed is ErrExpired (TestTelemetryLosses).
func TestFailedRefreshThenDeadline(t *testing.T) {
	d := newStuckDriver()
	close(d.unstuck) // a hung KeepAlive fails at once
	l, err := backend.New(d)
	require.NoError(t, err)
	defer l.Close()
	ls, err := l.TryAcquire(context.Background(), "r", backend.WithTTL(500*time.Millisecond), backend.WithAutoRenew(false))
	require.NoError(t, err)
	d.set(func(d *stuckDriver) { d.hangKA = true })
	require.ErrorIs(t, ls.Refresh(context.Background()), backend.ErrUnavailable)
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no loss signal")
	}
	require.ErrorIs(t, ls.Err(), backend.ErrDeadline)
	require.ErrorIs(t, ls.Err(), errStuckNet, "the Refresh's error is kept")
	require.NotErrorIs(t, ls.Err(), backend.ErrExpired)
}
