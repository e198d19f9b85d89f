package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// hub is a driver's wake-up channel: one pub/sub subscription, opened when
// the driver's first acquisition waits and kept until the driver closes, on
// the channel that releases publish to when the next waiter in a queue is
// one of this driver's. A message names the waiting acquisition (its owner
// id), and the token if the release granted it the lock, and wakes only it. After the subscription broke, when messages may
// have been lost, every waiter is woken to try again.
type hub struct {
	c       Client
	channel string
	wakeups *atomic.Int64

	mu      sync.Mutex
	ps      *goredis.PubSub
	waiters map[string]*sub // by owner id
	ready   chan struct{}   // closed once the server confirmed the subscription
	closed  bool
	err     error         // why the hub stopped (client closed)
	done    chan struct{} // closed when the receive loop has returned
	stopped chan struct{} // closed when the hub stops
}

// sub is one waiting acquisition's registration.
type sub struct {
	h      *hub
	owner  string
	notify chan struct{} // one pending wake-up at most
	token  atomic.Int64  // set by a message that granted the lock
}

// granted returns the token of a grant announced to the waiter, or 0.
func (s *sub) granted() int64 { return s.token.Load() }

func newHub(c Client, channel string, wakeups *atomic.Int64) *hub {
	return &hub{c: c, channel: channel, wakeups: wakeups, waiters: make(map[string]*sub),
		ready: make(chan struct{}), stopped: make(chan struct{})}
}

// subscribed reports whether the subscription is confirmed, so that a
// message published from now on reaches the hub.
func (h *hub) subscribed() bool {
	select {
	case <-h.ready:
		return true
	default:
		return false
	}
}

// register adds the waiter owner and returns once the subscription is
// confirmed (subscribing first if nobody has).
func (h *hub) register(ctx context.Context, owner string) (*sub, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, h.stopErr()
	}
	if h.ps == nil {
		// If sending SUBSCRIBE fails, the receive loop's reconnection sends
		// it again (go-redis keeps the channel), and register waits for the
		// confirmation or ctx.
		h.ps = h.c.Subscribe(ctx, h.channel)
		h.done = make(chan struct{})
		go h.loop(h.ps, h.done)
	}
	s := &sub{h: h, owner: owner, notify: make(chan struct{}, 1)}
	h.waiters[owner] = s
	h.mu.Unlock()

	select {
	case <-h.ready:
		return s, nil
	case <-h.stopped:
		s.close()
		return nil, h.stopErr()
	case <-ctx.Done():
		s.close()
		return nil, ctx.Err()
	}
}

func (h *hub) stopErr() error {
	if h.err != nil {
		return h.err
	}
	return errors.New("redis: locker closed")
}

// close removes the waiter.
func (s *sub) close() {
	s.h.mu.Lock()
	if s.h.waiters[s.owner] == s {
		delete(s.h.waiters, s.owner)
	}
	s.h.mu.Unlock()
}

func (s *sub) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// loop receives messages and the subscription's confirmation until the
// pub/sub connection is closed.
func (h *hub) loop(ps *goredis.PubSub, done chan struct{}) {
	defer close(done)
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			h.mu.Lock()
			stop := h.closed || errors.Is(err, goredis.ErrClosed)
			if stop && !h.closed {
				h.closed, h.err = true, fmt.Errorf("redis: pub/sub: %w", err)
				close(h.stopped)
			}
			// Messages may have been lost: every waiter tries again (and a
			// waiter whose client is closed finds out).
			h.wakeAllLocked()
			h.mu.Unlock()
			if stop {
				return
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "subscribe" && m.Channel == h.channel {
				h.mu.Lock()
				if !h.subscribed() {
					close(h.ready)
				}
				h.mu.Unlock()
			}
		case *goredis.Message:
			// "<owner>" (try again) or "<owner>:<token>" (granted).
			owner, tok, grant := strings.Cut(m.Payload, ":")
			h.mu.Lock()
			if s := h.waiters[owner]; s != nil {
				if grant {
					if t, err := strconv.ParseInt(tok, 10, 64); err == nil && t > 0 {
						s.token.Store(t)
					}
				}
				h.wakeups.Add(1)
				s.wake()
			}
			h.mu.Unlock()
		}
	}
}

func (h *hub) wakeAllLocked() {
	for _, s := range h.waiters {
		s.wake()
	}
}

// close stops the hub: waiters still registered are woken and fail.
func (h *hub) close() error {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.stopped)
	}
	ps, done := h.ps, h.done
	h.wakeAllLocked()
	h.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	if err != nil && !errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redis: close pub/sub: %w", err)
	}
	return nil
}
