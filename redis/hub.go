package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// hub shares one pub/sub connection among all waiting acquisitions of a
// driver: it subscribes to a lock's release channel while anyone waits for
// that lock and wakes every waiter of the lock on each message.
type hub struct {
	c       Client
	wakeups *atomic.Int64

	mu      sync.Mutex
	ps      *goredis.PubSub
	chans   map[string]*channelSubs
	pending map[string]int // SUBSCRIBEs sent and not yet confirmed, by channel
	closed  bool
	err     error         // why the hub stopped (client closed)
	done    chan struct{} // closed when the receive loop has returned
	stopped chan struct{} // closed when the hub stops
}

type channelSubs struct {
	waiters   map[*sub]struct{}
	confirmed chan struct{} // closed once the server confirmed the SUBSCRIBE
	ok        bool
}

// sub is one waiter's subscription.
type sub struct {
	h      *hub
	ch     string
	notify chan struct{} // one pending wake-up at most
}

func newHub(c Client, wakeups *atomic.Int64) *hub {
	return &hub{c: c, wakeups: wakeups, chans: make(map[string]*channelSubs), pending: make(map[string]int),
		stopped: make(chan struct{})}
}

// subscribe registers a waiter on channel and returns once the server has
// confirmed the subscription, so that every release published from then on
// reaches it.
func (h *hub) subscribe(ctx context.Context, channel string) (*sub, error) {
	h.mu.Lock()
	if h.closed {
		err := h.err
		h.mu.Unlock()
		if err == nil {
			err = errors.New("redis: locker closed")
		}
		return nil, err
	}
	if h.ps == nil {
		h.ps = h.c.Subscribe(context.Background())
		h.done = make(chan struct{})
		go h.loop(h.ps, h.done)
	}
	s := &sub{h: h, ch: channel, notify: make(chan struct{}, 1)}
	cs := h.chans[channel]
	if cs == nil {
		cs = &channelSubs{waiters: make(map[*sub]struct{}), confirmed: make(chan struct{})}
		h.chans[channel] = cs
		h.pending[channel]++
		if err := h.ps.Subscribe(ctx, channel); err != nil {
			h.pending[channel]--
			delete(h.chans, channel)
			h.mu.Unlock()
			return nil, fmt.Errorf("redis: subscribe: %w", err)
		}
	}
	cs.waiters[s] = struct{}{}
	confirmed := cs.confirmed
	h.mu.Unlock()

	select {
	case <-confirmed:
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
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return h.err
	}
	return errors.New("redis: locker closed")
}

// close unsubscribes the waiter; the channel is unsubscribed when its last
// waiter leaves.
func (s *sub) close() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.chans[s.ch]
	if cs == nil {
		return
	}
	delete(cs.waiters, s)
	if len(cs.waiters) == 0 {
		delete(h.chans, s.ch)
		if !h.closed {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = h.ps.Unsubscribe(ctx, s.ch) // on failure, a spare subscription is harmless
			cancel()
		}
	}
}

func (s *sub) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// loop receives messages and subscription confirmations until the pub/sub
// connection is closed.
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
			if m.Kind != "subscribe" {
				continue
			}
			h.mu.Lock()
			if h.pending[m.Channel] > 0 {
				h.pending[m.Channel]--
			}
			if h.pending[m.Channel] == 0 {
				delete(h.pending, m.Channel)
				if cs := h.chans[m.Channel]; cs != nil && !cs.ok {
					cs.ok = true
					close(cs.confirmed)
				}
			}
			h.mu.Unlock()
		case *goredis.Message:
			h.mu.Lock()
			if cs := h.chans[m.Channel]; cs != nil {
				for s := range cs.waiters {
					h.wakeups.Add(1)
					s.wake()
				}
			}
			h.mu.Unlock()
		}
	}
}

func (h *hub) wakeAllLocked() {
	for _, cs := range h.chans {
		for s := range cs.waiters {
			s.wake()
		}
	}
}

// close stops the hub: waiters still subscribed are woken and fail.
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
