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
	"github.com/fencelock/fencelock/fencing"
)

// state is where an acquisition stands in Redis.
type state int

const (
	stIdle     state = iota // nothing of ours in Redis
	stUnknown               // an acquire was sent; whether it applied is unknown
	stHeld                  // granted: the lock key holds our value
	stReleased              // Release finished
)

// retryMax caps the backoff between attempts of a waiter whose attempts fail
// (server unreachable).
const retryMax = time.Second

// lease implements backend.DriverLease: one acquisition. Its value in the
// lock key is "<owner>:<token>", owner being unique to this acquisition.
type lease struct {
	d      *driver
	k      keys
	owner  string
	prefix string // owner + ":"
	ttlMs  int64

	mu     sync.Mutex
	st     state
	token  fencing.Token
	relErr error
}

// Lost implements backend.DriverLease. Redis tells nobody when a key expires
// or is deleted unless the server's keyspace notifications are configured,
// so the holder learns of a loss from its next renewal (every TTL/3) or its
// local deadline: the channel is nil.
func (l *lease) Lost() <-chan struct{} { return nil }

func (l *lease) setState(st state) {
	l.mu.Lock()
	l.st = st
	l.mu.Unlock()
}

// Lock implements backend.DriverLease. The first attempt is the acquire
// script alone; a waiter then subscribes to the lock's release channel and
// tries again whenever a release is published, or when the lock key's
// remaining TTL (plus jitter) has passed in case a notice was lost.
func (l *lease) Lock(ctx context.Context, wait bool) (fencing.Token, time.Time, error) {
	l.mu.Lock()
	if l.st != stIdle {
		l.mu.Unlock()
		return 0, time.Time{}, errors.New("redis: Lock called twice on one acquisition")
	}
	l.mu.Unlock()

	// TryAcquire takes a free key even inside a yield window: the marker
	// keeps a releaser's next wait from jumping the queue, and a TryAcquire
	// never waits.
	sent, res, err := l.attempt(ctx, wait)
	if err != nil || res.granted {
		return l.result(sent, res, err)
	}
	if !wait {
		return 0, time.Time{}, fmt.Errorf("%w: held by another holder", backend.ErrNotAcquired)
	}

	s, err := l.d.hub.subscribe(ctx, l.k.channel)
	if err != nil {
		return 0, time.Time{}, err
	}
	defer s.close()

	// Until this waiter has been woken once it counts as a newcomer and
	// respects the yield marker of a release that woke earlier waiters.
	woken := false
	backoff := 50 * time.Millisecond
	var failingSince time.Time // first failed attempt of the current run of failures
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		sent, res, err := l.attempt(ctx, !woken)
		var after time.Duration
		switch {
		case err == nil && res.granted:
			return l.result(sent, res, nil)
		case err != nil:
			if ctx.Err() != nil || errors.Is(err, goredis.ErrClosed) || errors.Is(err, ErrNotReplicated) {
				return l.result(sent, res, err)
			}
			// A waiter cut off from the server for a whole TTL gives up,
			// as an etcd or ZooKeeper waiter whose lease could not be
			// renewed does, rather than wait on a dead connection.
			if failingSince.IsZero() {
				failingSince = sent
			}
			if time.Since(failingSince) >= time.Duration(l.ttlMs)*time.Millisecond {
				return l.result(sent, res, fmt.Errorf("redis: server unreachable for a TTL while waiting: %w", err))
			}
			after, backoff = backoff, min(2*backoff, retryMax)
		default:
			failingSince = time.Time{}
			backoff = 50 * time.Millisecond
			after = l.fallback(res.n)
		}
		timer.Reset(after)
		select {
		case <-ctx.Done():
			return 0, time.Time{}, ctx.Err()
		case <-s.notify:
		case <-timer.C:
		}
		woken = true
	}
}

// fallback is how long a waiter waits for a release notice before it tries
// again anyway: the lock key's remaining TTL plus up to 10% (at least 5ms,
// at most 100ms) of jitter, so that waiters whose notice was lost do not all
// retry at once. A key without expiry (written by another tool) is checked
// again after this acquisition's TTL.
func (l *lease) fallback(pttl int64) time.Duration {
	d := time.Duration(pttl) * time.Millisecond
	if pttl < 0 {
		d = time.Duration(l.ttlMs) * time.Millisecond
	}
	j := min(max(d/10, 5*time.Millisecond), 100*time.Millisecond)
	return d + rand.N(j) + time.Millisecond
}

// attempt runs the acquire script once; sent is when it was sent.
func (l *lease) attempt(ctx context.Context, respectYield bool) (time.Time, acquireResult, error) {
	l.setState(stUnknown)
	sent := time.Now()
	res, err := l.d.acquire(ctx, l, respectYield)
	if err == nil && !res.granted {
		l.setState(stIdle) // a refusal writes nothing
	}
	return sent, res, err
}

// result ends Lock: a grant moves the lease to held. After an error the
// state stays unknown, so that Release removes a key the attempt may have
// written.
func (l *lease) result(sent time.Time, res acquireResult, err error) (fencing.Token, time.Time, error) {
	if err != nil {
		return 0, time.Time{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st, l.token = stHeld, fencing.Token(res.n)
	return l.token, sent, nil
}

// KeepAlive implements backend.DriverLease: the refresh script extends the
// lock key only if it still holds this acquisition's value; it never
// re-creates a vanished key.
func (l *lease) KeepAlive(ctx context.Context) error {
	l.mu.Lock()
	st := l.st
	l.mu.Unlock()
	switch st {
	case stReleased:
		return fmt.Errorf("%w: redis: renewal after release", backend.ErrLeaseLost)
	case stHeld:
	default:
		return nil // nothing held yet: the lock key carries the expiry
	}
	n, err := refreshScript.Run(ctx, l.d.c, []string{l.k.lock}, l.prefix, l.ttlMs).Int64()
	if err != nil {
		return fmt.Errorf("redis: refresh script: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("%w: redis: lock key %q is gone or no longer this acquisition's", backend.ErrLeaseLost, l.k.lock)
	}
	return nil
}

// Release implements backend.DriverLease: the release script deletes the
// lock key only if it holds this acquisition's value, and publishes on the
// lock's channel. It is idempotent once it has succeeded.
func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.st {
	case stReleased:
		return l.relErr
	case stIdle:
		l.st = stReleased
		return nil
	}
	n, err := releaseScript.Run(ctx, l.d.c, []string{l.k.lock, l.k.yield},
		l.prefix, l.k.channel, l.d.yield.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("redis: release script: %w", err)
	}
	if n != 1 && l.st == stHeld {
		l.relErr = fmt.Errorf("%w: redis: lock key %q was already gone or someone else's", backend.ErrLeaseLost, l.k.lock)
	}
	l.st = stReleased
	return l.relErr
}
