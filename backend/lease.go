package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/backend/driver"
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
	locker  *Locker
	drv     driver.Lease // nil until attach
	locking bool         // the driver's Lock is in flight (under mu)
	name    string
	s       settings

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu sync.Mutex
	// lockCancel ends the context of the driver's Lock while it runs: a
	// loss ends the acquisition (set by attach, cleared by lockReturned).
	lockCancel context.CancelCauseFunc
	timer      *time.Timer   // fires tick at armed; nil until first armed
	armed      time.Time     // when timer fires; zero while it is not armed
	renewing   chan struct{} // closed when the renewal in flight returns; nil if none is
	renewSent  time.Time     // when the renewal in flight was started
	lastErr    error         // the last failed renewal's error, for the loss cause
	// suspended: a renewal failed, or went unanswered for the patience
	// (see patience), and none has succeeded since; suspendChanged is
	// closed and replaced at each change (Suspended).
	suspended      bool
	suspendChanged chan struct{}
	token          fencing.Token
	deadline       time.Time // zero while no expiry clock runs
	renewAt        time.Time
	acquired       time.Time
	holding        bool   // granted and not ended: the hold is measured
	value          string // the stored value (WithValue)

	opMu      sync.RWMutex // Refresh holds it shared, Release exclusively
	releaseMu sync.Mutex   // serializes driver releases
	released  bool         // the driver released successfully
	lockGone  error        // the driver found the lock already gone on release
}

func newLease(l *Locker, name string, s settings) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Lease{locker: l, name: name, s: s, ctx: ctx, cancel: cancel}
}

// attach gives the lease its driver lease, about to Lock under a context
// that cancel ends, and starts the expiry clock if the driver started it.
// From now until lockReturned a loss cancels that context with its cause
// (at once if the lease was lost already).
func (ls *Lease) attach(drv driver.Lease, started time.Time, cancel context.CancelCauseFunc) {
	ls.mu.Lock() // the timer may fire at once
	defer ls.mu.Unlock()
	ls.drv, ls.locking, ls.lockCancel = drv, true, cancel
	if ls.ctx.Err() != nil {
		cancel(context.Cause(ls.ctx))
	}
	if !started.IsZero() {
		ls.extendLocked(started)
	}
}

// lockReturned records that the driver's Lock returned: from now on a loss
// releases the driver lease in the background (before, the acquisition
// does, once Lock has returned, as driver.Lease promises).
func (ls *Lease) lockReturned() {
	ls.mu.Lock()
	ls.locking, ls.lockCancel = false, nil
	ls.mu.Unlock()
}

// driverLost is the driver's Request.Lost: the backend observed the lease
// or its lock key gone.
func (ls *Lease) driverLost(cause error) {
	if !errors.Is(cause, ErrLeaseLost) {
		cause = fmt.Errorf("%w: %w", ErrLeaseLost, cause)
	}
	ls.lose(fmt.Errorf("%q: %w", ls.name, cause))
}

// Name returns the lock name.
func (ls *Lease) Name() string { return ls.name }

// Token returns the fencing token of this grant. Send it with every write to
// the protected resource.
func (ls *Lease) Token() fencing.Token { return ls.token }

// Holder returns the holder identity stored with the lock ("" for a lease
// acquired WithValue, which stores its value instead).
func (ls *Lease) Holder() string {
	if ls.s.value != nil {
		return ""
	}
	return ls.s.holder
}

// Value returns the value stored with the lock: the one given with
// WithValue, or the last one Proclaim stored ("" for a lease acquired
// without WithValue).
func (ls *Lease) Value() string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.value
}

// Proclaim replaces the value stored with the lock (see WithValue) while
// the lease holds it, keeping its token: status tools and election
// observers see the new value with the same token. It is stored only if
// the lock is still this lease's on the server; if it is not, Proclaim
// returns an error matching ErrLeaseLost (and fires the loss signal) and
// stores nothing. A Proclaim in flight when the lease is lost locally (its
// deadline passed) also returns ErrLeaseLost, though the server, where the
// lock was still this lease's, may have stored it. It returns an error
// matching ErrReleased after Release, ErrInvalidOption for a lease acquired
// without WithValue or a value WithValue would refuse, and ErrUnavailable
// if the backend did not answer (the new value may or may not be stored
// then: call Proclaim again).
func (ls *Lease) Proclaim(ctx context.Context, value string) error {
	if ls.s.value == nil {
		return fmt.Errorf("fencelock: proclaim %q: %w: the lease was acquired without WithValue", ls.name, ErrInvalidOption)
	}
	if err := CheckValue(value); err != nil {
		return fmt.Errorf("fencelock: proclaim %q: %w", ls.name, err)
	}
	ls.opMu.Lock() // one at a time, and never beside Release
	defer ls.opMu.Unlock()
	if err := ls.Err(); err != nil {
		return fmt.Errorf("fencelock: proclaim %q: %w", ls.name, err)
	}
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ls.ctx, cancel)
	defer stop()
	if err := ls.drv.Proclaim(callCtx, value); err != nil {
		if ends(err) {
			ls.lose(lossCause(err))
		}
		if ls.ctx.Err() != nil {
			return fmt.Errorf("fencelock: proclaim %q: %w", ls.name, context.Cause(ls.ctx))
		}
		return fmt.Errorf("fencelock: proclaim %q: %w", ls.name, unanswered(ctx, err))
	}
	ls.mu.Lock()
	ls.value = value
	ls.mu.Unlock()
	return nil
}

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
// ErrReleased after Release (or once Release has started). An error
// matching ErrUnavailable (the backend unreachable, or ctx ended before it
// answered: the error then matches ctx.Err() too) or ErrPermission (the
// backend refused the renewal: a revoked grant) leaves the lease held until
// its deadline, as a failed background renewal does.
func (ls *Lease) Refresh(ctx context.Context) error {
	ls.opMu.RLock()
	defer ls.opMu.RUnlock()
	if err := ls.Err(); err != nil {
		return fmt.Errorf("fencelock: refresh %q: %w", ls.name, err)
	}
	// The call ends with the lease too: Release (and so Close) waits for a
	// Refresh in flight, and must not wait for an unanswered one.
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ls.ctx, cancel)
	defer stop()
	sent, err := ls.drv.KeepAlive(callCtx)
	if err != nil {
		if ends(err) {
			ls.lose(lossCause(err))
		}
		ls.mu.Lock()
		if ls.ctx.Err() == nil {
			// A renewal was asked for and failed: a loss at the deadline
			// is ErrDeadline, not ErrExpired, with auto-renew off too.
			ls.lastErr = err
		}
		ls.mu.Unlock()
		if ls.ctx.Err() != nil {
			return fmt.Errorf("fencelock: refresh %q: %w", ls.name, context.Cause(ls.ctx))
		}
		return fmt.Errorf("fencelock: refresh %q: %w", ls.name, unanswered(ctx, err))
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err := ls.Err(); err != nil {
		return fmt.Errorf("fencelock: refresh %q: %w", ls.name, err)
	}
	ls.lastErr = nil
	ls.extendLocked(sent)
	return nil
}

// Release gives the lock up: the loss signal fires with ErrReleased and the
// lock key is removed only if it is still this grant's, so a stale or retried
// Release never releases a newer holder. Release is idempotent. If the lease
// had been lost, Release still cleans up and returns an error matching
// ErrLeaseLost. If the backend cannot be reached (or ctx ends before it
// answers), Release returns an error matching ErrUnavailable
// (after asking again a few times within the local deadline: a client
// whose server just died sends the next request to another) and may be
// called again; renewal has stopped, so at worst the lock expires with its
// TTL. The request of a Release that failed so may still have
// reached the backend: a later Release then finds the lock key gone and, as
// it cannot tell that from a lost lease, returns an error matching
// ErrLeaseLost. The lock is not held by this lease either way.
func (ls *Lease) Release(ctx context.Context) error {
	if t := ls.locker.tel; t.traces {
		return t.release(ctx, ls)
	}
	return ls.release(ctx)
}

// release is Release, without its span (telemetry.release adds it).
func (ls *Lease) release(ctx context.Context) error {
	ls.end(&releasedError{name: ls.name}, endReleased)
	ls.opMu.Lock() // waits for a Refresh in flight
	err := ls.releaseDriver(ctx)
	ls.opMu.Unlock()
	// Wait for a renewal that was in flight when the lease ended (its
	// context is cancelled), so that none outlives Release; waiting for it
	// before the driver's release would only add latency. A driver call
	// that does not heed its context is not waited for past ctx.
	ls.mu.Lock()
	renewing := ls.renewing
	ls.mu.Unlock()
	if renewing != nil {
		select {
		case <-renewing:
		case <-ctx.Done():
		}
	}
	if err == nil || errors.Is(err, ErrLeaseLost) {
		ls.locker.forget(ls)
		if cause := context.Cause(ls.ctx); errors.Is(cause, ErrLeaseLost) {
			err = cause
		}
	}
	if err != nil {
		return fmt.Errorf("fencelock: release %q: %w", ls.name, unanswered(ctx, err))
	}
	return nil
}

// releasedError is the cause of a released lease's end (matching
// ErrReleased), its message formatted only when asked for: every
// acquisition ends so.
type releasedError struct{ name string }

func (e *releasedError) Error() string { return fmt.Sprintf("%v: %q", ErrReleased, e.name) }
func (e *releasedError) Unwrap() error { return ErrReleased }

// closedError is the cause of the end of a lease that Locker.Close
// released (matching ErrReleased).
type closedError struct{ name string }

func (e *closedError) Error() string {
	return fmt.Sprintf("%v: %q (the Locker was closed)", ErrReleased, e.name)
}

func (e *closedError) Unwrap() error { return ErrReleased }

// releaseRetries is how many times releaseDriver asks again after the
// backend was unavailable, releaseBackoff the first pause (doubled each
// time): a client whose server just died (an etcd member killed) fails
// the request in flight, and its next one goes to another server. Beyond
// that the backend is down, and the lock expires with its TTL.
const (
	releaseRetries = 3
	releaseBackoff = 50 * time.Millisecond
)

// releaseDriver calls the driver's Release until it succeeds once; a call
// that finds the backend unavailable is retried releaseRetries times, while
// ctx lasts and the lease's local deadline has not passed (past it the
// lock expires anyway), unless the caller's client was closed, which no
// retry reopens. A retry that finds the lock already gone succeeds.
func (ls *Lease) releaseDriver(ctx context.Context) error {
	ls.releaseMu.Lock()
	defer ls.releaseMu.Unlock()
	if ls.released {
		return ls.lockGone
	}
	// A lease lost before its release leaves its lock-delay in force.
	lost := errors.Is(context.Cause(ls.ctx), ErrLeaseLost)
	err := ls.drv.Release(ctx, lost)
	retried := false
	for try, pause := 0, releaseBackoff; try < releaseRetries && errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrClientClosed) && ls.beforeDeadline(pause); try, pause = try+1, 2*pause {
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		err, retried = ls.drv.Release(ctx, lost), true
	}
	if retried && errors.Is(err, ErrLeaseLost) {
		// The lock is gone: most likely the request that failed removed
		// it and only its answer was lost. A loss signalled before is
		// still Release's error (see Release).
		err = nil
	}
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		return err
	}
	ls.released, ls.lockGone = true, err
	return err
}

// beforeDeadline reports whether the local deadline is more than d away
// (or no expiry clock runs).
func (ls *Lease) beforeDeadline(d time.Duration) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.deadline.IsZero() || time.Until(ls.deadline) > d
}

// granted records a successful Lock and starts the hold.
func (ls *Lease) granted(g driver.Grant) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.token = g.Token
	ls.acquired = time.Now()
	if !g.Sent.IsZero() {
		ls.extendLocked(g.Sent)
	}
	if err := ls.Err(); err != nil {
		return err
	}
	if ls.deadline.IsZero() || !ls.acquired.Before(ls.deadline) {
		return fmt.Errorf("%w: granted after the local deadline", ErrLeaseLost)
	}
	ls.holding = true
	ls.locker.tel.holding(ls)
	if !ls.s.autoRenew || ls.s.maxHold > 0 {
		ls.scheduleLocked() // the renewal schedule of a holder differs from a waiter's
	}
	return nil
}

// abandonGrace is how long a failed Acquire waits for the removal of what
// it left in the backend (one request to a reachable server) before it
// returns and lets the removal finish in the background.
const abandonGrace = 100 * time.Millisecond

// abandon ends a lease whose acquisition failed and removes whatever it left
// in the backend.
//
// It waits for that removal for abandonGrace at most, so that a failed
// Acquire returns soon after its context ends even when the backend cannot
// be reached; the removal goes on in the background, until it succeeds,
// the TTL has passed (the backend then removes it itself), or for
// closeReleaseTimeout once the Locker closes (Close waits for it).
func (ls *Lease) abandon() {
	ls.end(fmt.Errorf("%w: acquisition failed", ErrReleased), endReleased)
	l := ls.locker
	l.pending.Add(1) // the failed acquisition holds a slot: Close is not past Wait
	done := make(chan struct{})
	go func() {
		defer l.pending.Done()
		defer close(done)
		// Not ended by Close: an Acquire that failed because the Locker
		// is closing must still remove its entry. Shutdown waits for it
		// until its own context ends (l.aborted), as for the release of a
		// held lease.
		ctx, cancel := context.WithTimeout(context.Background(), ls.s.ttl)
		defer cancel()
		stopAbort := context.AfterFunc(l.aborted, cancel)
		defer stopAbort()
		_ = ls.releaseDriver(ctx) // on failure the TTL removes it
	}()
	t := time.NewTimer(abandonGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// extendLocked moves the deadline to sent + TTL - drift and schedules the
// next renewal at sent + TTL/3. ls.mu must be held.
func (ls *Lease) extendLocked(sent time.Time) {
	if d := sent.Add(ls.s.ttl - ls.s.drift); d.After(ls.deadline) {
		ls.deadline = d
		ls.renewAt = sent.Add(ls.s.ttl / 3)
		ls.scheduleLocked()
	}
}

// renewingLocked reports whether the lease is to be renewed at renewAt: a
// waiter always is (it has no handle to call Refresh on), a holder if
// auto-renew is on, until the max hold.
func (ls *Lease) renewingLocked() bool {
	return !ls.deadline.IsZero() && (ls.acquired.IsZero() ||
		ls.s.autoRenew && (ls.s.maxHold == 0 || ls.renewAt.Before(ls.acquired.Add(ls.s.maxHold))))
}

// maxHoldStoppedLocked reports whether the max hold is what stopped the
// renewals of this holder. ls.mu must be held.
func (ls *Lease) maxHoldStoppedLocked() bool {
	return !ls.acquired.IsZero() && ls.s.autoRenew && ls.s.maxHold > 0 &&
		!ls.renewAt.Before(ls.acquired.Add(ls.s.maxHold))
}

// scheduleLocked arms the timer for the next renewal or the deadline,
// whichever comes first; while a renewal is in flight, for the deadline
// alone, so that the loss signal fires at the deadline however long the
// driver's call takes. A timer armed for an earlier time is left as it
// is: tick then finds nothing due and arms it again. So an acquisition
// arms it once rather than at every extension; arming a timer can wake an
// idle thread, a cost an uncontended acquire+release would pay several
// times. ls.mu must be held.
func (ls *Lease) scheduleLocked() {
	if ls.deadline.IsZero() || ls.ctx.Err() != nil {
		return
	}
	at := ls.deadline
	if ls.renewing == nil && ls.renewingLocked() && ls.renewAt.Before(at) {
		at = ls.renewAt
	}
	if ls.timer != nil && !ls.armed.IsZero() && !at.Before(ls.armed) {
		return
	}
	ls.armed = at
	if ls.timer == nil {
		ls.timer = time.AfterFunc(time.Until(at), ls.tick)
	} else {
		ls.timer.Reset(time.Until(at))
	}
}

// end fires the loss signal with cause (the lease ended how) and stops the
// timer; a tick in flight sees the cancel and does not set it again.
func (ls *Lease) end(cause error, how ending) {
	ls.mu.Lock()
	h := ls.endLocked(cause, how)
	ls.mu.Unlock()
	ls.endHold(h)
}

// endLocked is end with ls.mu held. Cancelling under ls.mu orders the loss
// with extensions: none moves the deadline once the signal fired. It
// returns the hold it ended, for endHold once ls.mu is released.
func (ls *Lease) endLocked(cause error, how ending) hold {
	first := ls.ctx.Err() == nil
	ls.cancel(cause)
	if ls.lockCancel != nil {
		ls.lockCancel(context.Cause(ls.ctx)) // the first cause, if ended before
	}
	if ls.timer != nil {
		ls.timer.Stop()
		ls.armed = time.Time{}
	}
	if !first || !ls.holding {
		return hold{}
	}
	ls.holding = false
	return hold{ended: true, d: time.Since(ls.acquired), how: how, cause: cause}
}

// hold is how a held lease ended (ended is false if it was not held, or
// had ended before).
type hold struct {
	ended bool
	d     time.Duration
	how   ending
	cause error
}

// endHold records a hold that ended: in the Locker's hold times, its
// metrics and its log.
func (ls *Lease) endHold(h hold) {
	if !h.ended {
		return
	}
	ls.locker.holds.record(ls.name, h.d)
	ls.locker.tel.ended(ls, int64(ls.token), h.d, h.how, h.cause)
}

// lose fires the loss signal and, in the background, removes the lock key if
// it is still ours so that waiters need not wait for the server-side expiry.
func (ls *Lease) lose(cause error) {
	ls.mu.Lock()
	first := ls.ctx.Err() == nil
	var h hold
	if first {
		if ls.maxHoldStoppedLocked() {
			// Renewals stopped at the max hold, so the lease was in its
			// last TTL: the backend's word that it ended (its expiry,
			// seen before the local deadline's timer fired on a busy
			// machine) is the max hold's doing too.
			cause = fmt.Errorf("%w (%v), renewals stopped: %w", ErrMaxHold, ls.s.maxHold, cause)
		}
		h = ls.endLocked(cause, lossEnding(cause))
	}
	ls.mu.Unlock()
	ls.endHold(h)
	if first {
		ls.cleanUpLost()
	}
}

// cleanUpLost removes, in the background, the lock key of a lease that was
// just lost, if it is still ours. Close bounds it.
func (ls *Lease) cleanUpLost() {
	ls.mu.Lock()
	acquiring := ls.drv == nil || ls.locking
	ls.mu.Unlock()
	if acquiring {
		// Lost during NewLease or Lock: the loss ends Lock's context, and
		// the failed acquisition cleans up once Lock has returned.
		return
	}
	if !ls.locker.begin() {
		return // Close releases it
	}
	go func() {
		defer ls.locker.pending.Done()
		ctx, cancel := context.WithTimeout(context.Background(), ls.s.ttl)
		defer cancel()
		stop := context.AfterFunc(ls.locker.aborted, cancel)
		defer stop()
		// As Release: after a Refresh or Proclaim in flight (the loss has
		// cancelled it), never beside it.
		ls.opMu.Lock()
		err := ls.releaseDriver(ctx)
		ls.opMu.Unlock()
		if err == nil || errors.Is(err, ErrLeaseLost) {
			ls.locker.forget(ls)
		}
	}()
}

// tick runs when the timer fires: it fires the loss signal if the deadline
// has passed, and renews the lease if a renewal is due. It runs on the
// timer's own goroutine, so a lease costs no goroutine while it waits, and
// one while a renewal is in flight. Before it calls the driver, it arms the
// timer for the deadline: if the call is still in flight then (a client that
// does not heed its context, a partitioned connection), that second tick
// fires the loss signal on time, on a goroutine of its own, and cancels the
// renewal's context.
func (ls *Lease) tick() {
	now := time.Now()
	ls.mu.Lock()
	if ls.ctx.Err() != nil {
		ls.mu.Unlock()
		return
	}
	ls.armed = time.Time{} // fired
	deadline := ls.deadline
	token := ls.token
	if !now.Before(deadline) {
		cause := fmt.Errorf("%w: %q: no renewal succeeded", ErrDeadline, ls.name)
		switch {
		case ls.renewing != nil:
			// The renewal's context ends at this same instant: its error
			// may not be in yet, but no answer came in time.
			cause = fmt.Errorf("%w: %q: the renewal in flight got no answer: %w", ErrDeadline, ls.name, ErrUnavailable)
		case ls.lastErr != nil:
			cause = fmt.Errorf("%w: %q: no renewal succeeded (last error: %w)", ErrDeadline, ls.name, ls.lastErr)
		case ls.maxHoldStoppedLocked():
			cause = fmt.Errorf("%w (%v): %q: renewals stopped", ErrMaxHold, ls.s.maxHold, ls.name)
		case !ls.acquired.IsZero() && !ls.s.autoRenew:
			// No renewal was asked for: the TTL ran out.
			cause = fmt.Errorf("%w: %q: not refreshed before the local deadline (auto-renew is off)", ErrExpired, ls.name)
		}
		h := ls.endLocked(cause, lossEnding(cause))
		ls.mu.Unlock()
		ls.endHold(h)
		ls.cleanUpLost()
		return
	}
	if ls.renewing != nil || !ls.renewingLocked() || now.Before(ls.renewAt) {
		ls.scheduleLocked()
		ls.mu.Unlock()
		return
	}
	done := make(chan struct{})
	ls.renewing, ls.renewSent = done, now
	ls.scheduleLocked() // for the deadline
	ls.mu.Unlock()
	// Unanswered for the patience: suspended, the renewal still in flight.
	unanswered := time.AfterFunc(ls.patience(), func() {
		ls.mu.Lock()
		if ls.renewing == done && ls.ctx.Err() == nil {
			ls.setSuspendedLocked(true)
		}
		ls.mu.Unlock()
	})
	defer unanswered.Stop()

	err := ls.renew(deadline)
	ls.locker.tel.renewed(ls, err, deadline)

	ls.mu.Lock()
	ls.renewing = nil
	close(done)
	if ls.ctx.Err() == nil && !ends(err) {
		ls.setSuspendedLocked(err != nil)
	}
	if ends(err) {
		ls.mu.Unlock()
		ls.lose(fmt.Errorf("%w: %q: renewal: %w", ErrLeaseLost, ls.name, err))
		return
	}
	if err != nil && ls.ctx.Err() == nil {
		// Logged under ls.mu while the lease is held: a loss ends it
		// under ls.mu too, so its line comes after this one, and no
		// retry is logged once the loss was (the deadline often ends the
		// lease while a renewal is in flight, which then fails).
		ls.locker.tel.retrying(ls, int64(token), err, deadline)
	}
	ls.scheduleLocked()
	ls.mu.Unlock()
}

// waitPatience is the share of the TTL for which a waiter's renewal may go
// unanswered before a wait that ends is taken to have lost the backend
// (see silence): well above a renewal's round trip on a loaded machine,
// well below the TTL/3 between renewals; minWaitPatience is its floor, for
// short TTLs (a scheduling delay on a loaded two-core machine with the race
// detector on can reach tens of milliseconds).
const (
	waitPatience    = 6
	minWaitPatience = 200 * time.Millisecond
)

// silence returns why the backend is taken to have stopped answering this
// lease, or nil: its renewal in flight has gone unanswered for more than
// TTL/waitPatience (minWaitPatience at least), or its last renewal failed
// without an answer (an error
// matching ErrUnavailable). A wait that ends then is no evidence that
// someone else holds the lock.
func (ls *Lease) silence(now time.Time) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.renewing != nil {
		if d := now.Sub(ls.renewSent); d > ls.patience() {
			return fmt.Errorf("%w: the waiter's renewal got no answer for %v", ErrUnavailable, d.Round(time.Millisecond))
		}
	}
	if ls.lastErr != nil && errors.Is(ls.lastErr, ErrUnavailable) {
		return fmt.Errorf("the waiter's last renewal failed: %w", ls.lastErr)
	}
	return nil
}

// patience is how long a renewal may go unanswered before the backend is
// taken to have stopped answering (see waitPatience).
func (ls *Lease) patience() time.Duration {
	return max(ls.s.ttl/waitPatience, minWaitPatience)
}

// setSuspendedLocked records whether the lease is suspended, waking
// Suspended's callers at a change. ls.mu is held.
func (ls *Lease) setSuspendedLocked(on bool) {
	if ls.suspended == on {
		return
	}
	ls.suspended = on
	if ls.suspendChanged != nil {
		close(ls.suspendChanged)
		ls.suspendChanged = nil
	}
}

// ends reports whether err, from a renewal or a Proclaim, ends the lease:
// the lease is gone (ErrLeaseLost), or the caller's client was closed
// (ErrClientClosed), after which no renewal can succeed, so waiting for
// the local deadline would only keep the holder writing on a lease it
// cannot keep.
func ends(err error) bool {
	return errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrClientClosed)
}

// lossCause is err, which ends the lease (see ends), as a loss cause: it
// matches ErrLeaseLost.
func lossCause(err error) error {
	if errors.Is(err, ErrLeaseLost) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrLeaseLost, err)
}

// renew makes one renewal attempt bounded by the deadline. On a failure other
// than a lost lease it schedules a retry. ls.mu must not be held.
func (ls *Lease) renew(deadline time.Time) error {
	ctx, cancel := context.WithDeadline(ls.ctx, deadline)
	defer cancel()
	sent, err := ls.drv.KeepAlive(ctx)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err == nil {
		ls.lastErr = nil
		if ls.ctx.Err() == nil {
			ls.extendLocked(sent)
		}
		return nil
	}
	if ls.ctx.Err() == nil {
		ls.lastErr = err
	}
	ls.renewAt = time.Now().Add(min(ls.s.ttl/10, time.Second))
	return err
}

// Suspended reports whether the backend has stopped answering ls now: the
// lease may or may not still be held, and the loss signal fires at the
// local deadline unless an answer comes first (Curator's SUSPENDED beside
// LOST). changed is closed at the next change of that state. A holder
// that must not act while in doubt stops on suspension; the default
// (ignoring it) relies on the deadline.
//
// Every backend reports it: a lease is suspended once a renewal failed or
// went unanswered for TTL/6 (200ms at least), so within about TTL/2 of
// the backend going silent (a renewal is due every TTL/3), and no longer
// once a renewal succeeds. ZooKeeper also reports its connection's state,
// which it may know sooner: suspended as soon as the client sees the
// connection drop (either suffices). Once the lease has ended, the state
// no longer changes.
func (ls *Lease) Suspended() (suspended bool, changed <-chan struct{}) {
	ls.mu.Lock()
	if ls.suspendChanged == nil {
		ls.suspendChanged = make(chan struct{})
	}
	own, ownChanged, drv := ls.suspended, ls.suspendChanged, ls.drv
	ls.mu.Unlock()
	if drv == nil {
		return own, ownChanged
	}
	drvOn, drvChanged := drv.Suspended()
	if drvChanged == nil {
		return own, ownChanged
	}
	// Either may change: one channel for both, closed by a goroutine
	// that lives until the first change or the lease's end.
	both := make(chan struct{})
	go func() {
		defer close(both)
		select {
		case <-ownChanged:
		case <-drvChanged:
		case <-ls.ctx.Done():
		}
	}()
	return own || drvOn, both
}
