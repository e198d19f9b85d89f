package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// closeReleaseTimeout bounds how long Close spends releasing held leases.
const closeReleaseTimeout = 5 * time.Second

// Locker acquires named locks from one backend. Open one by URL with Open, or
// with an adapter's constructor (etcd.New, mem.New, ...), which both end in
// New. A Locker is safe for concurrent use; every Acquire gets its own lease,
// so two acquisitions of one name through one Locker exclude each other and
// get different tokens.
type Locker struct {
	drv     Driver
	base    settings
	closing context.Context
	close   context.CancelCauseFunc

	mu      sync.Mutex
	closed  bool
	pending sync.WaitGroup // acquisitions in flight and background cleanups
	held    map[*Lease]struct{}
}

// New returns a Locker over drv. opts are defaults for every acquisition; an
// Acquire's own options override them. New checks the defaults against the
// driver's limits.
func New(drv Driver, opts ...Option) (*Locker, error) {
	base, err := defaults(drv, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Locker{drv: drv, base: base, closing: ctx, close: cancel, held: make(map[*Lease]struct{})}, nil
}

// defaults applies opts to the default settings and checks the result.
func defaults(drv Driver, opts []Option) (settings, error) {
	base := defaultSettings()
	for _, o := range opts {
		if o != nil {
			o(&base)
		}
	}
	_, err := resolve(base, drv, nil)
	return base, err
}

// Acquire blocks until it holds the lock called name or ctx is done. A
// cancelled or expired ctx returns an error matching both ErrNotAcquired and
// ctx.Err(), and leaves nothing behind in the backend: Acquire returns once
// what it queued there is removed, or 100ms after the failure at most (when
// the backend cannot be reached), with the removal going on in the
// background until it succeeds or the TTL removes it. If the lease is lost
// while waiting (it could not be renewed, or the backend dropped it), Acquire
// returns an error matching ErrLeaseLost, never a grant.
func (l *Locker) Acquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, name, true, opts)
}

// TryAcquire takes the lock called name if it is free and returns at once
// with an error matching ErrNotAcquired if it is held. It still makes the
// round trips the backend needs, bounded by ctx.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, name, false, opts)
}

func (l *Locker) acquire(ctx context.Context, name string, wait bool, opts []Option) (*Lease, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	s, err := resolve(l.base, l.drv, opts)
	if err != nil {
		return nil, err
	}
	if !l.begin() {
		return nil, fmt.Errorf("fencelock: acquire %q: %w", name, ErrClosed)
	}
	defer l.pending.Done()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopOnClose := context.AfterFunc(l.closing, func() { cancel(ErrClosed) })
	defer stopOnClose()
	if ctx.Err() != nil {
		return nil, acquireError(ctx, name, ctx.Err())
	}

	dl, started, err := l.drv.NewLease(ctx, Request{Name: name, TTL: s.ttl, Holder: s.holder, Metadata: s.metadata})
	if err != nil {
		return nil, acquireError(ctx, name, err)
	}
	ls := newLease(l, name, s, dl, started)
	stopOnLoss := context.AfterFunc(ls.ctx, func() { cancel(context.Cause(ls.ctx)) })
	token, restarted, err := dl.Lock(ctx, wait)
	stopOnLoss()
	if err == nil {
		err = ls.granted(token, restarted)
	}
	if err != nil {
		ls.abandon()
		return nil, acquireError(ctx, name, err)
	}

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		rctx, rcancel := context.WithTimeout(context.Background(), closeReleaseTimeout)
		defer rcancel()
		return nil, errors.Join(fmt.Errorf("fencelock: acquire %q: %w", name, ErrClosed), ls.Release(rctx))
	}
	l.held[ls] = struct{}{}
	l.mu.Unlock()
	return ls, nil
}

// acquireError maps a failed acquisition to the package's errors: a closed
// Locker to ErrClosed, a lost lease to ErrLeaseLost, and a cancelled or expired
// wait to an error matching both ErrNotAcquired and ctx.Err().
func acquireError(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, ErrClosed), errors.Is(cause, ErrLeaseLost):
			return fmt.Errorf("fencelock: acquire %q: %w", name, cause)
		case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrClosed):
		default:
			if cause != ctx.Err() && cause != nil {
				return fmt.Errorf("fencelock: acquire %q: %w: %w (%w)", name, ErrNotAcquired, ctx.Err(), cause)
			}
			return fmt.Errorf("fencelock: acquire %q: %w: %w", name, ErrNotAcquired, ctx.Err())
		}
	}
	return fmt.Errorf("fencelock: acquire %q: %w", name, err)
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

func (l *Locker) forget(ls *Lease) {
	l.mu.Lock()
	delete(l.held, ls)
	l.mu.Unlock()
}

// Close stops the Locker: pending Acquire calls return an error matching
// ErrClosed, held leases are released (their loss signal fires with
// ErrReleased), and the driver is closed. Leases that could not be released
// are reported in the returned error; their locks expire with their TTL.
// Close is idempotent.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.close(ErrClosed)
	l.pending.Wait()

	l.mu.Lock()
	held := make([]*Lease, 0, len(l.held))
	for ls := range l.held {
		held = append(held, ls)
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeReleaseTimeout)
	defer cancel()
	var errs []error
	for _, ls := range held {
		if err := ls.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, l.drv.Close())
	return errors.Join(errs...)
}
