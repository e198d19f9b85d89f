package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

// state is where an acquisition stands in Redis.
type state uint8

const (
	stIdle     state = iota // no lock key of ours (maybe a queue entry: see lease.queued)
	stUnknown               // an acquire was sent; whether it applied is unknown
	stHeld                  // granted: the lock key holds our value
	stReleased              // Release finished
)

// retryMax caps the backoff between attempts of a waiter whose attempts fail
// (server unreachable).
const retryMax = time.Second

// A waiter next in line behind a holder that is not fencelock's (redsync,
// bsm/redislock: their releases publish nothing) polls: its attempts are
// foreignPollMin apart at first, the gap doubling up to foreignPollMax, each
// gap drawn at random from its upper half (jitter, so that waiters of
// several locks do not poll in step). A foreign release thus reaches it
// within foreignPollMax plus a round trip, and a foreign client that takes
// the key back at once is not able to starve it: each poll finds the key
// free with the chance that the key is free.
const (
	foreignPollMin = 5 * time.Millisecond
	foreignPollMax = 50 * time.Millisecond
)

// An acquisition released while its last attempt's fate was unknown leaves
// an end mark in Redis for endMarkTTLs times its TTL, endMarkMin at least:
// a copy of that attempt that arrives meanwhile (held in the network) takes
// neither the lock nor a queue place. One arriving later still can hold the
// lock for its TTL.
const (
	endMarkTTLs = 10
	endMarkMin  = time.Minute
)

// lease implements driver.Lease: one acquisition. Its value in the
// lock key is "<owner>:<token>", owner being unique to this acquisition;
// while it waits, owner is its entry in the lock's queue.
type lease struct {
	d     *redisDriver
	k     *keys
	owner string
	ttlMs int64
	cand  *candidate // an election candidate's value key and value; nil for a lock
	// args are what the acquire and release scripts take of this
	// acquisition, boxed once: the seven keys (lock, counter, queue,
	// expiry, foreign, gap, end mark), then owner and ttlMs.
	args [9]any

	mu      sync.Mutex
	st      state
	queued  bool  // an attempt put (or kept) an entry of ours in the queue
	failing error // the last attempt's error while no entry is known to be queued
	sub     *sub  // the waiter's subscription, while Lock waits
	token   fencing.Token
}

// Suspended implements driver.Lease: go-redis reconnects on its own and
// does not tell. (Redis tells nobody either when a key expires or is
// deleted, unless the server's keyspace notifications are configured, so
// the holder learns of a loss from its next renewal, every TTL/3, or its
// local deadline: the adapter never calls Request.Lost.)
func (l *lease) Suspended() (bool, <-chan struct{}) { return false, nil }

// Lock implements driver.Lease. An acquisition takes a free lock
// that nobody waits for with one acquire script. A waiter joins the lock's
// queue with its first attempt. If its driver's wake channel is not
// subscribed yet, it subscribes then and tries again once the server
// confirms the subscription: a release may have granted it the lock
// meanwhile, unseen (the acquire script returns such a grant). If the
// server refuses the subscription (an ACL without the channel), the wait
// fails at once with an error matching backend.ErrPermission, and the
// release that follows removes its queue entry or hands on a grant it was
// given. It tries again when a release names it, or, in
// case the notice was lost or never sent (a crashed holder or waiter), when
// the time the failed attempt returned has passed; if it is next and the
// holder is not fencelock's (its release publishes nothing), it polls, at
// most foreignPollMax apart. Its renewals (KeepAlive,
// every TTL/3) keep its queue entry and wake it if it is next and the lock
// is free, or if a release granted it the lock. The timer and the renewals
// run while the subscription is pending too, so a grant made then is found
// even if the subscription is slow to come.
func (l *lease) Lock(ctx context.Context, wait bool) (driver.Grant, error) {
	g, err := l.lock(ctx, wait)
	return g, l.lockError(ctx, err)
}

// lockError maps an error of lock (driver.WaitError) by the acquisition's
// queue state: an error other than ctx's own is an attempt that ctx's end
// cut short if the last attempt did not fail (see attempt).
func (l *lease) lockError(ctx context.Context, err error) error {
	l.mu.Lock()
	w := driver.Wait{Where: "redis: queued behind the holder", Queued: l.queued, Last: l.failing, CutShort: err != ctx.Err()}
	l.mu.Unlock()
	return driver.WaitError(ctx, err, w)
}

// lock is Lock before its errors are mapped (lockError): a first attempt
// if the wake channel is not subscribed yet, then, for a waiter, wait.
func (l *lease) lock(ctx context.Context, wait bool) (driver.Grant, error) {
	// An attempt is made before the wait if the wake channel is not
	// subscribed yet (a TryAcquire, or a Locker's first wait): it queues the
	// waiter, and the one after the subscription finds a grant made
	// meanwhile.
	if wait && l.d.hub.subscribed() {
		return l.wait(ctx, false, time.Time{}, acquireResult{})
	}
	sent, res, err := l.attempt(ctx, wait)
	if err != nil || res.granted {
		return l.result(sent, res, err)
	}
	if !wait {
		if !res.next {
			return driver.Grant{}, fmt.Errorf("%w: free, but promised to an earlier waiter", backend.ErrNotAcquired)
		}
		return driver.Grant{}, fmt.Errorf("%w: held by another holder", backend.ErrNotAcquired)
	}
	return l.wait(ctx, true, sent, res)
}

// wait is Lock's wait in the lock's queue: it registers with the wake
// channel, then tries again after each pause (waiter.pause) unless woken
// sooner (waiter.sleep), until an attempt or a release grants it the lock
// or an error ends the wait (waitEnds). tried says that an attempt, sent
// at sent and answered with res, queued it before the registration.
func (l *lease) wait(ctx context.Context, tried bool, sent time.Time, res acquireResult) (driver.Grant, error) {
	s, err := l.d.hub.register(l.owner)
	if err != nil {
		return driver.Grant{}, err
	}
	l.setSub(s)
	defer func() {
		l.setSub(nil)
		s.close()
	}()
	w := waiter{l: l, s: s, backoff: 50 * time.Millisecond, poll: foreignPollMin, timer: time.NewTimer(time.Hour)}
	defer w.timer.Stop()
	if tried {
		w.ready = s.ready()
		w.lastSent = sent
	}
	for {
		if !tried {
			sent, res, err = l.attempt(ctx, true)
			if err == nil {
				w.lastSent = sent
			}
		}
		tried = false
		switch {
		case err == nil && res.granted:
			return l.result(sent, res, nil)
		case err != nil && waitEnds(ctx, err):
			return l.result(sent, res, err)
		}
		w.timer.Reset(w.pause(res, err))
		if g, done, err := w.sleep(ctx); done {
			return g, err
		}
	}
}

// waiter is what a waiter keeps between its attempts (lease.wait).
type waiter struct {
	l *lease
	s *sub
	// ready fires once, when the subscription is confirmed, if it was not
	// when the last attempt was sent: messages may have been missed (nil
	// if subscribed before the first attempt).
	ready    <-chan struct{}
	timer    *time.Timer
	lastSent time.Time     // of the last attempt that reached the server
	backoff  time.Duration // the pause after the next failed attempt
	poll     time.Duration // the next poll's gap behind a foreign holder
}

// waitEnds says whether err, an attempt's error, ends the wait; after the
// others the waiter tries again.
func waitEnds(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, goredis.ErrClosed) || errors.Is(err, ErrNotReplicated) ||
		errors.Is(err, backend.ErrLeaseLost) || errors.Is(err, backend.ErrPermission)
}

// pause is how long the waiter waits for a notice before it tries again,
// after an attempt answered with res or failed with err (one that does not
// end the wait): the backoff after a failure, else the fallback for a lost
// notice, or, next in line behind a foreign holder, the poll's gap.
func (w *waiter) pause(res acquireResult, err error) time.Duration {
	var after time.Duration
	if err != nil {
		// Try again; if the server stays unreachable, renewals fail
		// too and the lease's deadline ends the wait with
		// ErrLeaseLost, as for a holder.
		after, w.backoff = w.backoff, min(2*w.backoff, retryMax)
		return after
	}
	w.backoff = 50 * time.Millisecond
	after = w.l.fallback(res.wait)
	if res.next && res.foreign {
		// Nobody will tell us when this holder lets go.
		after = min(after, w.poll/2+rand.N(w.poll/2+1))
		w.poll = min(2*w.poll, foreignPollMax)
	} else {
		w.poll = foreignPollMin
	}
	return after
}

// sleep waits for the pause's timer, a release's notice or the
// subscription's confirmation, after which the waiter tries again; done
// if the wait ends instead: the context ended, the server refused the
// subscription, or a release granted the lock to the waiter.
func (w *waiter) sleep(ctx context.Context) (g driver.Grant, done bool, err error) {
	select {
	case <-ctx.Done():
		return driver.Grant{}, true, ctx.Err()
	case <-w.s.refused():
		// Nobody can tell this waiter that a release granted it the
		// lock: it gives up at once, and the release that follows
		// (backend.Locker's) drops its queue entry or hands on a
		// grant it was given.
		return driver.Grant{}, true, w.s.refusal()
	case <-w.ready:
		w.ready = nil
	case <-w.s.notify:
		if token := w.s.granted(); token != 0 {
			// A release granted the lock to us. Its expiry started when
			// that release ran, after our last attempt queued us: that
			// attempt's send time is an earlier start, so the local
			// deadline counted from it comes first.
			g, err = w.l.result(w.lastSent, acquireResult{granted: true, token: token}, nil)
			return g, true, err
		}
	case <-w.timer.C:
	}
	return driver.Grant{}, false, nil
}

// wakeWaiter makes Lock try again now, if it waits.
func (l *lease) wakeWaiter() {
	l.mu.Lock()
	if l.sub != nil {
		l.sub.wake()
	}
	l.mu.Unlock()
}

func (l *lease) setSub(s *sub) {
	l.mu.Lock()
	l.sub = s
	l.mu.Unlock()
}

// fallback is how long a waiter waits for a release notice before it tries
// again anyway, in case the notice was lost or never sent (a holder or an
// earlier waiter crashed): ms, the lock key's remaining TTL if the waiter is
// next in line, else the time left to the entry of the waiter ahead of all
// (in case it crashed), plus up to 10% (at least 5ms, at most 100ms) of
// jitter. A key without expiry (ms -1, written by another tool) is checked
// again after this acquisition's TTL (Lock polls sooner when the key's value
// is not fencelock's).
func (l *lease) fallback(ms int64) time.Duration {
	d := time.Duration(ms) * time.Millisecond
	if ms < 0 {
		d = time.Duration(l.ttlMs) * time.Millisecond
	}
	j := min(max(d/10, 5*time.Millisecond), 100*time.Millisecond)
	return d + rand.N(j) + time.Millisecond
}

// attempt runs the acquire script once; sent is when it was sent. With
// queue, a refused acquisition is in the queue afterwards: it joins it, or,
// if an earlier attempt queued it, it must still be there (else the attempt
// fails with ErrLeaseLost: its entry lapsed or was removed).
func (l *lease) attempt(ctx context.Context, queue bool) (time.Time, acquireResult, error) {
	l.mu.Lock()
	l.st = stUnknown
	mode := queueNo
	if queue {
		mode = queueJoin
		if l.queued {
			mode = queueStay
		}
	}
	l.mu.Unlock()
	sent := time.Now()
	res, err := l.d.acquire(ctx, l, mode)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// Cut short by the caller's context: that says nothing of the
		// backend, so the last answer (or failure) stands for
		// driver.WaitError.
	case err != nil:
		l.failing = err
	case !res.granted:
		l.st, l.failing = stIdle, nil // a refusal takes no lock key
		l.queued = l.queued || queue
	default:
		l.failing = nil
	}
	return sent, res, err
}

// result ends Lock: a grant moves the lease to held. After an error the
// state stays unknown, so that Release removes a key the attempt may have
// written.
func (l *lease) result(sent time.Time, res acquireResult, err error) (driver.Grant, error) {
	if err != nil {
		return driver.Grant{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st, l.token = stHeld, fencing.Token(res.token)
	return driver.Grant{Token: l.token, Sent: sent}, nil
}

// KeepAlive implements driver.Lease with the refresh script: a
// holder's lock key is extended only if it still holds this acquisition's
// value (a vanished key is never re-created); a waiter's queue entry is
// renewed, and the waiter woken if it is next and the lock is free. An
// election candidate's value key is extended with either (its name and
// lifetime are sent only then: a lock's renewal is as it was).
func (l *lease) KeepAlive(ctx context.Context) (time.Time, error) {
	sent := time.Now()
	l.mu.Lock()
	st, queued, failing := l.st, l.queued, l.failing
	l.mu.Unlock()
	switch {
	case st == stReleased:
		return time.Time{}, fmt.Errorf("%w: redis: renewal after release", backend.ErrLeaseLost)
	case st == stUnknown && !queued:
		// The first attempt is in flight, or failed unanswered. It may
		// have taken the lock, with an expiry counted from its arrival,
		// and nothing here can renew that key before its answer names
		// it: a renewal counted from now would put the local deadline
		// past the key's expiry. So this renewal fails, and is tried
		// again; if no answer comes, the deadline ends the wait.
		if failing == nil {
			failing = errFirstAttemptUnanswered
		}
		return time.Time{}, failing
	case st != stHeld && !queued:
		return sent, nil // nothing of ours in Redis
	}
	n, err := bounded(ctx, l.d, func() (int64, error) {
		if c := l.cand; c != nil {
			return refreshScript.Run(ctx, l.d.c, []string{l.k.lock, l.k.queue, l.k.expiry, c.keyName}, l.owner, l.ttlMs,
				c.keyTTL).Int64()
		}
		return refreshScript.Run(ctx, l.d.c, []string{l.k.lock, l.k.queue, l.k.expiry}, l.owner, l.ttlMs).Int64()
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: refresh script: %w", mapErr(err))
	}
	switch n {
	case 0:
		if st == stHeld {
			return time.Time{}, fmt.Errorf("%w: redis: lock key %q is gone or no longer this acquisition's", backend.ErrDeleted, l.k.lock)
		}
		return time.Time{}, fmt.Errorf("%w: redis: queue entry for %q lapsed or was removed", backend.ErrDeleted, l.k.lock)
	case 1:
		if st != stHeld {
			// Granted by a release while waiting, and the message has not
			// arrived (or was lost): the waiter's next attempt finds it.
			l.wakeWaiter()
			l.d.hub.suspect()
		}
	case 3:
		// Next in line and free: a release's wake-up not arrived (or
		// lost), or a holder whose key expired.
		l.wakeWaiter()
		l.d.hub.suspect()
	}
	return sent, nil
}

// Release implements driver.Lease: the release script deletes the
// lock key only if it holds this acquisition's value (and, unless lost,
// its lock-delay marker), drops its queue entry,
// deletes an election candidate's value key, and names the next waiter on
// the lock's channel.
func (l *lease) Release(ctx context.Context, lost bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st == stIdle && !l.queued {
		l.st = stReleased
		return nil
	}
	var endMark int64
	if l.st == stUnknown {
		// The last attempt may still be on its way (held in the network):
		// mark the acquisition ended, so that it takes nothing if it lands.
		endMark = max(endMarkTTLs*l.ttlMs, endMarkMin.Milliseconds())
	}
	var (
		n   int64
		err error
	)
	if l.d.unbounded(ctx) {
		n, err = l.release(ctx, endMark, !lost)
	} else {
		n, err = bounded(ctx, l.d, func() (int64, error) { return l.release(ctx, endMark, !lost) })
	}
	if err != nil {
		return fmt.Errorf("redis: release script: %w", mapErr(err))
	}
	held := l.st == stHeld
	l.st = stReleased
	if n != 1 && held {
		return fmt.Errorf("%w: redis: lock key %q was already gone or someone else's", backend.ErrDeleted, l.k.lock)
	}
	return nil
}

// release runs the release script once; endMark is how long in ms to keep
// the acquisition's end mark (0: none); clean is false for a release after
// a loss, which leaves a lock-delay in force.
func (l *lease) release(ctx context.Context, endMark int64, clean bool) (int64, error) {
	var cmd []any
	if l.cand == nil {
		cmd = make([]any, 0, 19)
		cmd = append(cmd, "evalsha", releaseHash, 7)
		cmd = append(cmd, l.args[:8]...) // the keys and owner
	} else {
		cmd = make([]any, 0, 20)
		cmd = append(cmd, "evalsha", releaseHash, 8)
		cmd = append(cmd, l.args[:7]...) // the keys
		cmd = append(cmd, l.cand.key, l.args[7])
	}
	cmd = append(cmd, l.d.wakePrefix, flag(!l.d.cfg.NoClockFloor), flag(l.d.direct()), endMark)
	cmd = append(cmd, l.d.fair[:]...)
	cmd = append(cmd, flag(clean))
	return l.d.eval(ctx, tryAgainWithin(l.ttlMs), cmd, releaseScript, releaseSrc).Int64()
}
