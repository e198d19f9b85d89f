package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

// state is where an acquisition stands in the database.
type state int

const (
	stIdle     state = iota // no lock row of ours (maybe a queue row: see lease.queued)
	stUnknown               // an acquire was sent; whether it applied is unknown
	stHeld                  // granted: the lock row is ours
	stReleased              // Release finished
)

// mode is what an acquire statement that does not grant the lock does
// with the lock's queue (the function's p_mode).
type mode int

const (
	modeTry  mode = 0 // nothing: a TryAcquire
	modeJoin mode = 1 // join the queue at its tail
	modeStay mode = 2 // renew the queue row an earlier attempt made; lost if it is gone
)

// retryMax caps the backoff between attempts of a waiter whose attempts
// fail (server unreachable).
const retryMax = time.Second

// errFirstAttemptUnanswered fails the renewals of an acquisition whose
// first attempt has had no answer yet: nothing of it is known to be in the
// database, so nothing can be renewed, and a renewal that arrived before
// the attempt would find nothing and report the lease lost.
var errFirstAttemptUnanswered = fmt.Errorf("%w: postgres: the acquisition's first attempt is not answered yet", backend.ErrUnavailable)

// lease implements driver.Lease: one acquisition, owner being its id in
// the lock row and the queue.
type lease struct {
	d     *pgDriver
	name  string
	owner string
	ttl   time.Duration
	ttlMs int64
	// acquireSQL is the acquire statement: statements.acquire for a lock,
	// statements.acquireValue for a candidate, whose meta is its value.
	acquireSQL string
	holder     any // the holder identity, or nil (a candidate's NULL)
	meta       any // the metadata as JSON text, or nil; a candidate's value
	lost       func(error)
	// notify wakes Lock's wait: a notification named this acquisition,
	// the listener (re)connected, or a renewal found the lock free or
	// granted to it. granted is the token a grant notification carried.
	notify  chan struct{}
	granted atomic.Int64

	mu      sync.Mutex
	st      state
	token   int64 // the grant's, once held
	queued  bool  // an attempt put (or kept) a queue row of ours
	failing error // the last attempt's error while no queue row is known
	// delay: the acquisition has a lock-delay (its owner id carries it).
	delay bool
	// revoked: a revocation naming this acquisition arrived before Lock
	// marked it held. Owner ids are never reused, so the acquisition's
	// rows are gone for good: Lock must not return a grant it read (a
	// promotion's notification, or an answer) before the revocation.
	revoked bool
}

// acquireResult is the answer of the acquire function.
type acquireResult struct {
	status string // granted, held, queued, lost
	token  int64
	waitMs int64 // queued or held: until the holder's lease ends
}

// Suspended implements driver.Lease: pgx reconnects on its own, and a
// lease lives in its rows, not in a session, so nothing is suspended.
func (l *lease) Suspended() (bool, <-chan struct{}) { return false, nil }

// wake makes Lock's wait try again now.
func (l *lease) wake() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// Lock implements driver.Lease. A TryAcquire is one acquire statement. A
// waiter joins the lock's queue with its first statement, then waits for
// the notification that a release granted it the lock (it carries the
// token: no further round trip), registered with its driver's listener
// before that statement (which starts the listener if it queued), the
// listener's (re)connection waking every registered waiter to try again
// (a notification may have been missed). In case a notification is lost
// or never sent (a holder crashed), it tries again when the holder's lease
// would end, and its renewals (KeepAlive, every TTL/3) wake it when they
// find the lock free or granted to it.
func (l *lease) Lock(ctx context.Context, wait bool) (driver.Grant, error) {
	g, err := l.lock(ctx, wait)
	return g, l.lockError(ctx, err)
}

// lockError maps an error of lock (driver.WaitError) by the acquisition's
// queue state: an error other than ctx's own is an attempt that ctx's end
// cut short if the last attempt did not fail (see attempt).
func (l *lease) lockError(ctx context.Context, err error) error {
	l.mu.Lock()
	w := driver.Wait{Where: "postgres: queued behind the holder", Queued: l.queued, Last: l.failing, CutShort: err != ctx.Err()}
	l.mu.Unlock()
	return driver.WaitError(ctx, err, w)
}

func (l *lease) lock(ctx context.Context, wait bool) (driver.Grant, error) {
	if !wait {
		sent, res, err := l.attempt(ctx, modeTry)
		if err != nil || res.status == "granted" {
			return l.result(sent, res, err)
		}
		return driver.Grant{}, fmt.Errorf("%w: postgres: held by another acquisition, or promised to an earlier waiter", backend.ErrNotAcquired)
	}
	h := l.d.hub
	if h != nil {
		// Registered before the first attempt, whether the listener is up
		// or not: a notification for it, or the listener's (re)connection
		// (which wakes every registered waiter), cannot come unheard. The
		// listener itself is started only once the attempt queued: a lock
		// nobody contends needs none.
		h.add(l, false)
		defer func() {
			if !l.held() {
				h.remove(l)
			}
		}()
	}
	sent, res, err := l.attempt(ctx, modeJoin)
	if err != nil || res.status != "queued" {
		return l.result(sent, res, err)
	}
	if h != nil {
		h.add(l, true) // starts the listener if it is not running
	}
	backoff := 50 * time.Millisecond
	timer := time.NewTimer(l.fallback(res.waitMs))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-l.notify:
			if l.wasRevoked() {
				return driver.Grant{}, errRevoked(l.name)
			}
			if tok := l.granted.Load(); tok != 0 {
				// A release granted us the lock with the expiry of our
				// queue row, which our renewals kept: the lease's clock,
				// started by NewLease, is already the right one.
				return l.result(time.Time{}, acquireResult{status: "granted", token: tok}, nil)
			}
		case <-timer.C:
		}
		sent, res, err = l.attempt(ctx, modeStay)
		var after time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil || errors.Is(err, backend.ErrPermission) || !errors.Is(err, backend.ErrUnavailable) {
				return l.result(sent, res, err)
			}
			// Try again; if the server stays unreachable, renewals fail
			// too and the lease's deadline ends the wait.
			after, backoff = backoff, min(2*backoff, retryMax)
		case res.status == "queued":
			backoff = 50 * time.Millisecond
			after = l.fallback(res.waitMs)
		default:
			return l.result(sent, res, nil)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(after)
	}
}

// fallback is how long a waiter waits for a notification before it tries
// again anyway, in case the notification was lost or never sent: ms, until
// the holder's lease ends, plus up to 10% (at least 5ms, at most 100ms) of
// jitter.
func (l *lease) fallback(ms int64) time.Duration {
	d := time.Duration(ms) * time.Millisecond
	j := min(max(d/10, 5*time.Millisecond), 100*time.Millisecond)
	return d + rand.N(j) + time.Millisecond
}

// attemptFloor is the least time an acquire statement is given (see
// attempt): with a short TTL (100ms is allowed) a loaded server or a
// brief wait for the row lock would otherwise be reported unavailable.
const attemptFloor = 2 * time.Second

// attempt runs the acquire statement once; sent is when it was sent. The
// statement is given up after one TTL (at least attemptFloor), whatever
// ctx allows: a grant whose answer comes later has expired on the server
// already (the lease, timed from sent, is then lost at once), and a commit that
// waits for a synchronous standby that is away waits until it is back
// (the cancel request ends the wait; the grant, committed on the primary
// alone, lapses at its TTL). So an Acquire fails with ErrUnavailable in
// time rather than block for as long as the standby is gone.
func (l *lease) attempt(ctx context.Context, m mode) (time.Time, acquireResult, error) {
	l.mu.Lock()
	l.st = stUnknown
	l.mu.Unlock()
	l.d.attempts.Add(1)
	sent := time.Now()
	var res acquireResult
	bound := max(l.ttl, attemptFloor)
	bounded, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err := l.d.c.QueryRow(bounded, l.acquireSQL, pgx.QueryExecModeExec,
		l.name, l.owner, l.ttlMs, int(m), l.holder, l.meta).Scan(&res.status, &res.token, &res.waitMs)
	switch {
	case err != nil && ctx.Err() == nil && bounded.Err() != nil:
		err = fmt.Errorf("%w: postgres: acquire: no answer within %v: the server is slow or unreachable, or its commit waits for a synchronous standby: %v",
			backend.ErrUnavailable, bound, oneLineError{err}) // %v: the caller's ctx did not end
	case err != nil:
		err = fmt.Errorf("postgres: acquire: %w", mapErr(err))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// Cut short by the caller's context: that says nothing of the
		// backend, so the last answer (or failure) stands for
		// driver.WaitError.
	case err != nil:
		l.failing = err
	case res.status == "lost":
		l.st, l.failing = stIdle, nil
		l.queued = false
		err = fmt.Errorf("%w: postgres: the acquisition's queue row lapsed or was revoked", backend.ErrDeleted)
	case res.status != "granted":
		l.st, l.failing = stIdle, nil
		l.queued = l.queued || res.status == "queued"
	default:
		l.failing = nil
	}
	return sent, res, err
}

// result ends Lock: a grant moves the lease to held, unless a revocation
// of the acquisition arrived first (then the grant was ended by an
// operator before Lock could return it: ErrLeaseLost). After an error the
// state stays unknown, so that Release removes rows the attempt may have
// written. The revocation's check and the move to held are one critical
// section, as is notified's check of held and its record of a revocation:
// a revocation either fails Lock here or finds the lease held and reports
// its loss.
func (l *lease) result(sent time.Time, res acquireResult, err error) (driver.Grant, error) {
	if err != nil {
		return driver.Grant{}, err
	}
	l.mu.Lock()
	if l.revoked {
		l.mu.Unlock()
		return driver.Grant{}, errRevoked(l.name)
	}
	l.st, l.queued, l.token = stHeld, false, res.token
	l.mu.Unlock()
	if h := l.d.hub; h != nil {
		h.add(l, false) // a revocation's notification reaches it
	}
	return driver.Grant{Token: fencing.Token(res.token), Sent: sent}, nil
}

func (l *lease) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st == stHeld
}

// KeepAlive implements driver.Lease with the renew function: a holder's
// lock row is extended only if it is still this acquisition's and live (a
// lapsed row is never revived); a waiter's queue row likewise, and the
// waiter is woken if the lock is free or was granted to it.
func (l *lease) KeepAlive(ctx context.Context) (time.Time, error) {
	sent := time.Now()
	l.mu.Lock()
	st, queued, failing := l.st, l.queued, l.failing
	l.mu.Unlock()
	switch {
	case st == stReleased:
		return time.Time{}, fmt.Errorf("%w: postgres: renewal after release", backend.ErrLeaseLost)
	case st == stUnknown && !queued:
		if failing == nil {
			failing = errFirstAttemptUnanswered
		}
		return time.Time{}, failing
	case st != stHeld && !queued:
		return sent, nil // nothing of ours in the database
	}
	var status string
	var token int64
	err := l.d.c.QueryRow(ctx, l.d.sql.renew, pgx.QueryExecModeExec, l.name, l.owner, l.ttlMs).Scan(&status, &token)
	if err != nil {
		return time.Time{}, fmt.Errorf("postgres: renew: %w", mapErr(err))
	}
	switch status {
	case "lost":
		if st == stHeld {
			return time.Time{}, fmt.Errorf("%w: postgres: lock %q is no longer this acquisition's, or its lease had ended", backend.ErrDeleted, l.name)
		}
		return time.Time{}, fmt.Errorf("%w: postgres: the queue row for %q lapsed or was revoked", backend.ErrDeleted, l.name)
	case "held", "free":
		if st != stHeld {
			// Granted while waiting, and the notification has not come
			// (or was lost), or the lock is free: the waiter's next
			// attempt takes it.
			l.wake()
		}
	}
	return sent, nil
}

// Release implements driver.Lease: the release function drops this
// acquisition's queue row and, if it holds the lock, grants it to the next
// waiter; it never touches a newer holder's row.
func (l *lease) Release(ctx context.Context, lost bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st == stIdle && !l.queued {
		l.st = stReleased
		return nil
	}
	if lost && l.st == stHeld && l.delay {
		// A holder with a lock-delay lost its lease: its lock row stays
		// as it is, to lapse at its expiry and be free the delay after
		// (a holder has no queue row to drop).
		l.st = stReleased
		if h := l.d.hub; h != nil {
			h.remove(l)
		}
		return nil
	}
	var status string
	err := l.d.c.QueryRow(ctx, l.d.sql.release, pgx.QueryExecModeExec, l.name, l.owner).Scan(&status)
	if err != nil {
		return fmt.Errorf("postgres: release: %w", mapErr(err))
	}
	held := l.st == stHeld
	l.st = stReleased
	if h := l.d.hub; h != nil {
		h.remove(l)
	}
	if held && status != "released" {
		return fmt.Errorf("%w: postgres: lock %q was no longer this acquisition's, or its lease had ended", backend.ErrDeleted, l.name)
	}
	return nil
}

// notified handles a notification naming this acquisition: a grant to a
// waiter (with its token), or a revocation, which reports a holder's loss
// at once, and otherwise is recorded and wakes Lock, which then fails with
// ErrLeaseLost, even if a grant (a promotion the revocation then ended)
// reached it first.
func (l *lease) notified(grant bool, token int64) {
	if grant {
		l.granted.Store(token)
		l.wake()
		return
	}
	l.mu.Lock()
	held := l.st == stHeld
	if !held {
		l.revoked = true
	}
	l.mu.Unlock()
	if held {
		l.lost(fmt.Errorf("%w: postgres: lock %q was revoked", backend.ErrRevoked, l.name))
		return
	}
	l.wake()
}

func (l *lease) wasRevoked() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.revoked
}

// errRevoked is Lock's error for an acquisition revoked while it waited,
// or after a grant Lock had not returned yet.
func errRevoked(name string) error {
	return fmt.Errorf("%w: postgres: the acquisition of lock %q was revoked while it waited", backend.ErrRevoked, name)
}

// Proclaim implements driver.Lease with one UPDATE of the lock row
// (statements.proclaim): the value becomes its metadata, a jsonb string,
// only where the row is still this acquisition's grant (its owner id and
// token) and its lease has not ended by the server's clock. No row updated
// is ErrLeaseLost: the lock was released, revoked, expired or granted to
// another acquisition, and nothing was stored. Like every statement, it is
// cancelled on the server when ctx ends.
func (l *lease) Proclaim(ctx context.Context, value string) error {
	l.mu.Lock()
	token := l.token
	l.mu.Unlock()
	tag, err := l.d.c.Exec(ctx, l.d.sql.proclaim, pgx.QueryExecModeExec, l.name, l.owner, token, value)
	if err != nil {
		return fmt.Errorf("postgres: proclaim: %w", mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: postgres: lock %q is no longer this acquisition's, or its lease had ended: value not stored", backend.ErrDeleted, l.name)
	}
	return nil
}
