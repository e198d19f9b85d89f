package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/fencing"
)

// Lease is one held lock: its name, its fencing token, the local deadline
// until which the holder may assume it holds, and a loss signal.
//
// The loss signal (Done, Context) fires when the lease is lost or released:
// when a renewal finds the lease gone, when the backend reports the lock key
// gone, or when no renewal succeeded by the local deadline. The deadline is
// measured on the monotonic clock from the moment the acquiring or renewing
// request was sent: sent + TTL - drift margin. The server counts the TTL from
// the moment it received that request, so the signal fires before the server
// could grant the lock to anyone else (given clocks that run at the same rate
// within the margin). A holder that sees the signal must stop writing; a
// holder that missed it (paused) is stopped by the fencing token at the
// resource.
//
// A Lease is safe for concurrent use.
type Lease struct {
	locker *Locker
	drv    DriverLease
	name   string
	s      settings

	ctx    context.Context
	cancel context.CancelCauseFunc
	kick   chan struct{} // wakes the renewal loop after the schedule changed
	ran    chan struct{} // closed when the renewal loop has returned

	mu       sync.Mutex
	token    fencing.Token
	deadline time.Time // zero while no expiry clock runs
	renewAt  time.Time
	acquired time.Time

	opMu      sync.RWMutex // Refresh holds it shared, Release exclusively
	releaseMu sync.Mutex   // serializes driver releases
	released  bool         // the driver released successfully
	lockGone  error        // the driver found the lock already gone on release
}

func newLease(l *Locker, name string, s settings, drv DriverLease, started time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	ls := &Lease{locker: l, drv: drv, name: name, s: s, ctx: ctx, cancel: cancel,
		kick: make(chan struct{}, 1), ran: make(chan struct{})}
	if !started.IsZero() {
		ls.extendLocked(started)
	}
	go ls.run()
	return ls
}

// Name returns the lock name.
func (ls *Lease) Name() string { return ls.name }

// Token returns the fencing token of this grant. Send it with every write to
// the protected resource.
func (ls *Lease) Token() fencing.Token { return ls.token }

// Holder returns the holder identity stored with the lock.
func (ls *Lease) Holder() string { return ls.s.holder }

// TTL returns the lease TTL.
func (ls *Lease) TTL() time.Duration { return ls.s.ttl }

// Done returns a channel closed when the lease is lost or released.
func (ls *Lease) Done() <-chan struct{} { return ls.ctx.Done() }

// Context returns a context cancelled when the lease is lost or released; run
// work under it. context.Cause reports why (an error matching ErrLeaseLost or
// ErrReleased).
func (ls *Lease) Context() context.Context { return ls.ctx }

// Err returns nil while the lease is held, then why it ended: an error
// matching ErrLeaseLost or ErrReleased.
func (ls *Lease) Err() error {
	if ls.ctx.Err() == nil {
		return nil
	}
	return context.Cause(ls.ctx)
}

// Deadline returns the local deadline: until then the holder may assume it
// holds the lock, unless the loss signal fired earlier. It carries a monotonic
// clock reading; compare it with time.Now or time.Until.
func (ls *Lease) Deadline() time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.deadline
}

// Refresh renews the lease now and moves the deadline. It returns an error
// matching ErrLeaseLost if the lease is gone (and fires the loss signal), or
// ErrReleased after Release. Other errors (the backend unreachable) leave the
// lease held until its deadline.
func (ls *Lease) Refresh(ctx context.Context) error {
	ls.opMu.RLock()
	defer ls.opMu.RUnlock()
	if err := ls.Err(); err != nil {
		return fmt.Errorf("fencelock: refresh %q: %w", ls.name, err)
	}
	sent := time.Now()
	if err := ls.drv.KeepAlive(ctx); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			ls.lose(err)
		}
		return fmt.Errorf("fencelock: refresh %q: %w", ls.name, err)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err := ls.Err(); err != nil {
		return fmt.Errorf("fencelock: refresh %q: %w", ls.name, err)
	}
	ls.extendLocked(sent)
	return nil
}

// Release gives the lock up: the loss signal fires with ErrReleased and the
// lock key is removed only if it is still this grant's, so a stale or retried
// Release never releases a newer holder. Release is idempotent. If the lease
// had been lost, Release still cleans up and returns an error matching
// ErrLeaseLost. If the backend cannot be reached, Release returns that error
// and may be called again; renewal has stopped, so at worst the lock expires
// with its TTL.
func (ls *Lease) Release(ctx context.Context) error {
	ls.cancel(fmt.Errorf("%w: %q", ErrReleased, ls.name))
	ls.opMu.Lock() // waits for a Refresh in flight
	err := ls.releaseDriver(ctx)
	ls.opMu.Unlock()
	// The renewal loop has seen the cancel by now. Waiting for it before the
	// driver's release would put a goroutine switch on the release's latency.
	<-ls.ran
	if err == nil || errors.Is(err, ErrLeaseLost) {
		ls.locker.forget(ls)
		if cause := context.Cause(ls.ctx); errors.Is(cause, ErrLeaseLost) {
			err = cause
		}
	}
	if err != nil {
		return fmt.Errorf("fencelock: release %q: %w", ls.name, err)
	}
	return nil
}

// releaseDriver calls the driver's Release until it succeeds once.
func (ls *Lease) releaseDriver(ctx context.Context) error {
	ls.releaseMu.Lock()
	defer ls.releaseMu.Unlock()
	if ls.released {
		return ls.lockGone
	}
	err := ls.drv.Release(ctx)
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		return err
	}
	ls.released, ls.lockGone = true, err
	return err
}

// granted records a successful Lock and starts the hold.
func (ls *Lease) granted(token fencing.Token, restarted time.Time) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.token = token
	ls.acquired = time.Now()
	if !restarted.IsZero() {
		ls.extendLocked(restarted)
	}
	if err := ls.Err(); err != nil {
		return err
	}
	if ls.deadline.IsZero() || !ls.acquired.Before(ls.deadline) {
		return fmt.Errorf("%w: granted after the local deadline", ErrLeaseLost)
	}
	if !ls.s.autoRenew || ls.s.maxHold > 0 {
		ls.wake() // the renewal schedule of a holder differs from a waiter's
	}
	return nil
}

// abandon ends a lease whose acquisition failed and removes whatever it left
// in the backend.
func (ls *Lease) abandon() {
	ls.cancel(fmt.Errorf("%w: acquisition failed", ErrReleased))
	<-ls.ran
	ctx, cancel := context.WithTimeout(context.Background(), ls.s.ttl)
	defer cancel()
	_ = ls.releaseDriver(ctx) // on failure the TTL removes it
}

// extendLocked moves the deadline to sent + TTL - drift and schedules the
// next renewal at sent + TTL/3. ls.mu must be held (or ls not yet shared).
func (ls *Lease) extendLocked(sent time.Time) {
	if d := sent.Add(ls.s.ttl - ls.s.drift); d.After(ls.deadline) {
		ls.deadline = d
		ls.renewAt = sent.Add(ls.s.ttl / 3)
		ls.wake()
	}
}

func (ls *Lease) wake() {
	select {
	case ls.kick <- struct{}{}:
	default:
	}
}

// lose fires the loss signal and, in the background, removes the lock key if
// it is still ours so that waiters need not wait for the server-side expiry.
func (ls *Lease) lose(cause error) {
	if ls.ctx.Err() != nil {
		return
	}
	ls.cancel(cause)
	if !ls.locker.begin() {
		return // Close releases it
	}
	go func() {
		defer ls.locker.pending.Done()
		<-ls.ran
		ctx, cancel := context.WithTimeout(context.Background(), ls.s.ttl)
		defer cancel()
		if err := ls.releaseDriver(ctx); err == nil || errors.Is(err, ErrLeaseLost) {
			ls.locker.forget(ls)
		}
	}()
}

// run renews the lease on schedule and fires the loss signal at the deadline
// or when the driver reports the lease gone. It returns when the lease ends.
// One timer serves both the renewal and the deadline.
func (ls *Lease) run() {
	defer close(ls.ran)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		ls.mu.Lock()
		deadline, renewAt := ls.deadline, ls.renewAt
		// A waiter is always renewed: it has no handle to call Refresh on.
		// A holder is renewed if auto-renew is on, until the max hold.
		renew := !deadline.IsZero() && (ls.acquired.IsZero() ||
			ls.s.autoRenew && (ls.s.maxHold == 0 || renewAt.Before(ls.acquired.Add(ls.s.maxHold))))
		ls.mu.Unlock()

		wakeAt := deadline
		if renew && renewAt.Before(wakeAt) {
			wakeAt = renewAt
		}
		var timerC <-chan time.Time
		if !wakeAt.IsZero() {
			timer.Reset(time.Until(wakeAt))
			timerC = timer.C
		}
		select {
		case <-ls.ctx.Done():
			return
		case <-ls.kick:
		case <-ls.drv.Lost():
			ls.lose(fmt.Errorf("%w: %q: the backend reports the lease or lock key gone", ErrLeaseLost, ls.name))
			return
		case now := <-timerC:
			switch {
			case !now.Before(ls.Deadline()):
				ls.lose(fmt.Errorf("%w: %q: no renewal succeeded before the local deadline", ErrLeaseLost, ls.name))
				return
			case renew && !now.Before(renewAt):
				if err := ls.renew(deadline); errors.Is(err, ErrLeaseLost) {
					ls.lose(fmt.Errorf("%w: %q: renewal: %w", ErrLeaseLost, ls.name, err))
					return
				}
			}
		}
	}
}

// renew makes one renewal attempt bounded by the deadline. On a failure other
// than a lost lease it schedules a retry.
func (ls *Lease) renew(deadline time.Time) error {
	ctx, cancel := context.WithDeadline(ls.ctx, deadline)
	defer cancel()
	sent := time.Now()
	err := ls.drv.KeepAlive(ctx)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err == nil {
		ls.extendLocked(sent)
		return nil
	}
	ls.renewAt = time.Now().Add(min(ls.s.ttl/10, time.Second))
	return err
}
