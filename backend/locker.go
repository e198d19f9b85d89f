package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// closeReleaseTimeout bounds how long Close spends: releasing held leases,
// waiting for background clean-ups and closing the driver.
const closeReleaseTimeout = 5 * time.Second

// Locker acquires named locks from one backend. Open one by URL with Open, or
// with an adapter's constructor (etcd.New, mem.New, ...), which both end in
// New. A Locker is safe for concurrent use; every Acquire gets its own lease,
// so two acquisitions of one name through one Locker exclude each other and
// get different tokens.
type Locker struct {
	drv   driver.Driver
	caps  driver.Capabilities // read once, at New
	base  settings
	tel   *telemetry // metrics, spans and logs (telemetry.go)
	holds *holdStats // hold times per name (holdstats.go)
	// aborted is cancelled when the context of Shutdown ends (Close's
	// after closeReleaseTimeout): background clean-ups stop then.
	aborted context.Context
	abort   context.CancelFunc

	mu      sync.Mutex
	closed  bool
	pending sync.WaitGroup // acquisitions in flight and background cleanups
	held    map[*Lease]struct{}
	// acquiring maps the acquisitions in flight to what ends their
	// context: Close cancels them.
	acquiring map[*Lease]context.CancelCauseFunc
}

// New returns a Locker over drv, for adapters' constructors (etcd.New,
// mem.New, ...). opts are defaults for every acquisition; an Acquire's own
// options override them. New checks the defaults against the driver's
// limits. The Locker owns drv from then on, even when New fails: Close (or
// the failure) shuts it down. A nil drv is an error matching
// ErrInvalidOption.
func New(drv driver.Driver, opts ...Option) (*Locker, error) {
	if drv == nil {
		return nil, fmt.Errorf("%w: New: nil driver", ErrInvalidOption)
	}
	caps := drv.Capabilities()
	base, obs, err := defaults(drv, caps, opts)
	if err != nil {
		return nil, errors.Join(err, shutdownNow(drv))
	}
	aborted, abort := context.WithCancel(context.Background())
	return &Locker{drv: drv, caps: caps, base: base, aborted: aborted, abort: abort,
		tel: newTelemetry(caps.Name, obs), holds: newHoldStats(holdStatsNames),
		held: make(map[*Lease]struct{}), acquiring: make(map[*Lease]context.CancelCauseFunc)}, nil
}

// defaults applies opts to the default settings (with the driver's default
// TTL, if it declares one) and checks the result. It returns the Locker-only
// options apart (nil if none was given).
func defaults(drv driver.Driver, caps driver.Capabilities, opts []Option) (settings, *observeOptions, error) {
	base := defaultSettings()
	if caps.DefaultTTL > 0 {
		base.ttl = caps.DefaultTTL
	}
	for _, o := range opts {
		if o != nil {
			o(&base)
		}
	}
	obs := base.obs
	base.obs = nil
	_, err := resolve(base, drv, caps, nil)
	return base, obs, err
}

// shutdownNow shuts down a driver that no Locker owns, bounded as Close is.
func shutdownNow(drv driver.Driver) error {
	ctx, cancel := context.WithTimeout(context.Background(), closeReleaseTimeout)
	defer cancel()
	return drv.Shutdown(ctx)
}

// Acquire blocks until it holds the lock called name or ctx is done. A
// cancelled or expired ctx returns an error matching ctx.Err() and either
// ErrNotAcquired, if the acquisition was queued behind another holder (the
// backend answered and the lock stayed held) or ctx had ended before
// Acquire was called, or ErrUnavailable, if the
// backend did not answer before ctx ended (it is down or cut off: whether
// the lock is free is unknown), or stopped answering while the acquisition
// was queued: the waiter's lease, renewed every TTL/3, had a renewal
// unanswered for more than TTL/6 (200ms at least), or its last renewal
// failed. A waiter cut off from the backend without ctx ending returns at
// its local deadline, within about its TTL of the cut, with an error
// matching ErrLeaseLost and ErrUnavailable. The client's own error stays
// in the chain.
// Either way it leaves nothing behind in the backend: Acquire returns once
// what it queued there is removed, or 100ms after the failure at most (when
// the backend cannot be reached), with the removal going on in the
// background until it succeeds or the TTL removes it. A backend that fails
// a request as unreachable returns an error matching ErrUnavailable without
// waiting for ctx. If the lease is lost while waiting (it could not be
// renewed, or the backend dropped it), Acquire returns an error matching
// ErrLeaseLost, never a grant; if that is because the backend could not be
// reached, it matches ErrUnavailable too.
func (l *Locker) Acquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, name, true, opts)
}

// TryAcquire takes the lock called name if it is free and returns at once
// with an error matching ErrNotAcquired if it is held. It still makes the
// round trips the backend needs, bounded by ctx: if the backend cannot be
// reached, or does not answer before ctx ends, the error matches
// ErrUnavailable (and ctx.Err(), if it ended), never ErrNotAcquired, so
// that a job that skips its work when the lock is held does not skip it
// when the backend is down.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, name, false, opts)
}

func (l *Locker) acquire(ctx context.Context, name string, wait bool, opts []Option) (*Lease, error) {
	if t := l.tel; t.metrics || t.traces || t.log != nil {
		return t.acquire(ctx, l, name, wait, opts)
	}
	return l.acquireLease(ctx, name, wait, opts)
}

// acquireLease is Acquire (wait) or TryAcquire, without its span and
// duration (telemetry.acquire adds them).
func (l *Locker) acquireLease(ctx context.Context, name string, wait bool, opts []Option) (*Lease, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	s, err := resolve(l.base, l.drv, l.caps, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ls := newLease(l, name, s)
	if !l.beginAcquire(ls, cancel) {
		return nil, fmt.Errorf("fencelock: acquire %q: %w", name, ErrClosed)
	}
	defer l.endAcquire(ls)
	if ctx.Err() != nil {
		// Given up before anything was asked: nothing is unknown about
		// the backend, the caller gave up.
		return nil, acquireError(ctx, name, fmt.Errorf("%w: context ended before the acquisition started", ErrNotAcquired), nil)
	}
	// From here, an error that does not say the lock is held (a driver's
	// ErrNotAcquired) is a backend that did not answer before ctx ended.

	req := driver.Request{Name: name, TTL: s.ttl, Holder: s.holder, Metadata: s.metadata, LockDelay: s.lockDelay,
		Lost: ls.driverLost}
	if s.value != nil {
		req.Holder, req.Metadata, req.Value = "", nil, s.value
		ls.value = *s.value
	}
	dl, started, err := l.drv.NewLease(ctx, req)
	if err != nil {
		ls.end(fmt.Errorf("%w: acquisition failed", ErrReleased), endReleased)
		return nil, acquireError(ctx, name, err, nil)
	}
	ls.attach(dl, started, cancel) // a loss ends ctx
	l.tel.locking(ctx, name, wait)
	g, err := dl.Lock(ctx, wait)
	ls.lockReturned()
	l.tel.locked(ctx, name, wait, g.Token, err)
	if err == nil {
		err = ls.granted(g)
	}
	if err != nil {
		silent := ls.silence(time.Now())
		ls.abandon()
		return nil, acquireError(ctx, name, err, silent)
	}

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		rctx, rcancel := context.WithTimeout(context.Background(), closeReleaseTimeout)
		defer rcancel()
		stop := context.AfterFunc(l.aborted, rcancel) // Shutdown's context ended
		defer stop()
		return nil, errors.Join(fmt.Errorf("fencelock: acquire %q: %w", name, ErrClosed), ls.Release(rctx))
	}
	l.held[ls] = struct{}{}
	l.mu.Unlock()
	return ls, nil
}

// acquireError maps a failed acquisition to the package's errors: a closed
// Locker to ErrClosed, a lost lease to ErrLeaseLost, and, after ctx ended,
// as driver.EndedWait decides: a held lock (the driver's ErrNotAcquired:
// TryAcquire found it held, or a queued wait was given up) to
// ErrNotAcquired unless silent says why the backend is taken to have
// stopped answering the waiter since (see Lease.silence), and any other
// failure to ErrUnavailable: the backend did not answer in time. Both of the latter match ctx.Err() too if ctx ended. err
// stays in the chain, but for a driver's ErrNotAcquired that silent
// overrides: its text stays, not its chain.
func acquireError(ctx context.Context, name string, err, silent error) error {
	if ctx.Err() == nil {
		return fmt.Errorf("fencelock: acquire %q: %w", name, err)
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrClosed), errors.Is(cause, ErrLeaseLost):
		return fmt.Errorf("fencelock: acquire %q: %w", name, cause)
	case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrClosed):
		return fmt.Errorf("fencelock: acquire %q: %w", name, err)
	}
	ctxErr := ctx.Err()
	// The driver's ErrNotAcquired: the backend had queued the acquisition
	// (or answered a TryAcquire that the lock is held).
	queued := errors.Is(err, ErrNotAcquired)
	kind := driver.EndedWait(queued, silent != nil)
	what := "no answer from the backend before the context ended"
	switch {
	case queued && kind == ErrUnavailable:
		// Queued, then the backend stopped answering: who holds the
		// lock now is unknown.
		msg := fmt.Errorf("fencelock: acquire %q: %w: queued, then the backend stopped answering: %w", name, silent, ctxErr)
		if cause != nil && cause != ctxErr {
			msg = fmt.Errorf("%w (%w)", msg, cause)
		}
		return fmt.Errorf("%w (the wait: %v)", msg, err)
	case kind == ErrNotAcquired:
		what = "gave up waiting"
	}
	msg := fmt.Errorf("fencelock: acquire %q: %w: %s: %w", name, kind, what, ctxErr)
	if cause != nil && cause != ctxErr {
		msg = fmt.Errorf("%w (%w)", msg, cause)
	}
	if err != ctxErr && err != cause {
		msg = fmt.Errorf("%w: %w", msg, err)
	}
	return msg
}

// begin registers an acquisition or background cleanup in flight; false if
// the Locker is closed.
func (l *Locker) begin() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.pending.Add(1)
	return true
}

// beginAcquire registers the acquisition of ls in flight, whose context
// cancel ends, for Close to cancel; false if the Locker is closed.
func (l *Locker) beginAcquire(ls *Lease, cancel context.CancelCauseFunc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.pending.Add(1)
	l.acquiring[ls] = cancel
	return true
}

// endAcquire ends what beginAcquire began.
func (l *Locker) endAcquire(ls *Lease) {
	l.mu.Lock()
	delete(l.acquiring, ls)
	l.mu.Unlock()
	l.pending.Done()
}

func (l *Locker) forget(ls *Lease) {
	l.mu.Lock()
	delete(l.held, ls)
	l.mu.Unlock()
}

// Close stops the Locker: pending Acquire calls return an error matching
// ErrClosed, held leases are released (their loss signal fires with
// ErrReleased), and the driver is closed. Leases that could not be released
// are reported in the returned error; their locks expire with their TTL.
// Close is Shutdown with a 5s bound: it returns within about 5s even when
// the backend cannot be reached. Close is idempotent.
func (l *Locker) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeReleaseTimeout)
	defer cancel()
	return l.Shutdown(ctx)
}

// Shutdown is Close bounded by ctx, as http.Server.Shutdown is: it releases
// held leases, waits for the clean-ups of failed acquisitions and lost
// leases, and closes the driver, until ctx ends; then it stops them, closes
// the driver's connections without asking the backend for anything more,
// and returns soon after (within about 100ms), reporting ctx's error with
// what could not be released (those locks expire with their TTL). Calls
// still in flight in a client that does not heed contexts end when their
// connections close. Once Shutdown or Close has started, later calls return
// nil at once.
func (l *Locker) Shutdown(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for _, cancel := range l.acquiring {
		cancel(ErrClosed)
	}
	l.mu.Unlock()
	stop := context.AfterFunc(ctx, l.abort)
	defer stop()
	defer l.abort() // whatever is left in the background stops now

	// Held leases are released while the acquisitions in flight end (at
	// once: their context is cancelled) and clean-ups in the background
	// finish (bounded by ctx: aborted). No lease is added to held once
	// closed is set.
	l.mu.Lock()
	held := make([]*Lease, 0, len(l.held))
	for ls := range l.held {
		held = append(held, ls)
	}
	l.mu.Unlock()
	for _, ls := range held {
		ls.end(&closedError{name: ls.name}, endClosed)
	}
	// Release concurrently: one unreachable backend would otherwise spend
	// the whole bound on the first lease.
	relErrs := make([]error, len(held))
	var wg sync.WaitGroup
	for i, ls := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			relErrs[i] = ls.Release(ctx)
		}()
	}
	pending := make(chan struct{})
	go func() {
		l.pending.Wait()
		close(pending)
	}()
	var errs []error
	select {
	case <-pending:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("fencelock: close: clean-ups still running: %w", ctx.Err()))
	}
	wg.Wait()
	errs = append(errs, relErrs...)
	errs = append(errs, l.drv.Shutdown(ctx))
	return errors.Join(errs...)
}
