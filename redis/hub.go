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

	"github.com/fencelock/fencelock/backend"
)

// hub is a driver's wake-up channel: one pub/sub subscription, opened when
// the driver's first acquisition waits and kept until the driver closes, on
// the channel that releases publish to when the next waiter in a queue is
// one of this driver's. A message names the waiting acquisition (its owner
// id), and the token if the release granted it the lock, and wakes only
// it. After the subscription broke, when messages may have been lost,
// every waiter is woken to try again.
//
// A subscription can also go deaf without breaking: go-redis's Sentinel
// client moves its pooled connections to the new primary after a
// failover, not its pub/sub connections, so a subscription on an old
// primary that is still up (SENTINEL FAILOVER, a partition) hears none of
// the new primary's publishes until Sentinel makes the old one a replica
// (8s at least after it sees it: sentinel.c waits SENTINEL_PUBLISH_PERIOD
// *4 before it reconfigures an instance that says it is a master, and
// looks every 10s). A waiter that finds a notice missing (see suspect) has
// the hub check: it publishes a ping on its own channel through the
// client, and if the subscription does not hear it within pingWait, the
// hub subscribes anew, on the server the client knows now.
//
// If the server refuses the subscription (an ACL user without the channel,
// &<prefix>:*, or without SUBSCRIBE), the waiters of that subscription fail
// with the server's error, which matches backend.ErrPermission: a waiter
// that cannot hear its grant must not stay in the queue, where a release
// would hand it the lock while everyone else waits. The next wait
// subscribes again (the ACL may have been fixed).
type hub struct {
	c       Client
	channel string
	wakeups *atomic.Int64

	mu      sync.Mutex
	cur     *subscription   // nil until the first wait, and after a refusal
	waiters map[string]*sub // by owner id
	closed  bool
	err     error         // why the hub stopped (client closed)
	stopped chan struct{} // closed when the hub stops
	stopCtx context.Context
	stop    context.CancelFunc // ends stopCtx, with stopped
	// The check (see suspect): one at a time, checkEvery apart at least.
	checking  bool
	lastCheck time.Time
	pings     int64         // the checks' pings so far
	ping      string        // the payload of the ping in flight
	pinged    chan struct{} // closed when it arrives
	renewals  atomic.Int64  // subscriptions replaced after a check (for tests)
}

// pingMark starts the payload of a check's ping; no owner id (hex) does.
const pingMark = "!"

// pingWait is how long a check waits for its ping; checkEvery is the
// least time between two checks.
const (
	pingWait   = time.Second
	checkEvery = time.Second
)

// pingScript publishes ARGV[2] on channel ARGV[1] (PUBLISH from a script:
// the user needs no ACL rule more than the release script does).
var pingScript = goredis.NewScript("return redis.call('PUBLISH', ARGV[1], ARGV[2])")

// subscription is one pub/sub connection's attempt to subscribe to the
// hub's channel, from the first wait to the hub's close or the server's
// refusal.
type subscription struct {
	ps      *goredis.PubSub
	renewal bool          // it replaced a subscription that went deaf
	ready   chan struct{} // closed once the server confirmed the subscription
	refused chan struct{} // closed when the server refused it; err says why
	err     error
	cancel  context.CancelFunc // ends a SUBSCRIBE still dialling
	done    chan struct{}      // closed when the receive loop has returned
}

func (s *subscription) confirmed() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// sub is one waiting acquisition's registration.
type sub struct {
	h      *hub
	s      *subscription
	owner  string
	notify chan struct{} // one pending wake-up at most
	token  atomic.Int64  // set by a message that granted the lock
}

// granted returns the token of a grant announced to the waiter, or 0.
func (s *sub) granted() int64 { return s.token.Load() }

// ready is closed once the subscription the waiter relies on is confirmed:
// messages published from then on reach it.
func (s *sub) ready() <-chan struct{} { return s.s.ready }

// refused is closed if the server refused that subscription; refusal
// returns the error.
func (s *sub) refused() <-chan struct{} { return s.s.refused }

func (s *sub) refusal() error { return s.s.err }

func newHub(c Client, channel string, wakeups *atomic.Int64) *hub {
	ctx, stop := context.WithCancel(context.Background())
	return &hub{c: c, channel: channel, wakeups: wakeups, waiters: make(map[string]*sub),
		stopped: make(chan struct{}), stopCtx: ctx, stop: stop}
}

// subscribed reports whether the subscription is confirmed, so that a
// message published from now on reaches the hub.
func (h *hub) subscribed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur != nil && h.cur.confirmed()
}

// register adds the waiter owner, subscribing first if nobody has. It
// does not wait for the subscription: the waiter watches sub.ready and
// sub.refused, and meanwhile its fallback timer still finds a grant.
func (h *hub) register(owner string) (*sub, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, h.stopErr()
	}
	if h.cur == nil {
		h.cur = h.subscribeLocked()
	}
	s := &sub{h: h, s: h.cur, owner: owner, notify: make(chan struct{}, 1)}
	h.waiters[owner] = s
	return s, nil
}

// subscribeLocked starts a subscription. Subscribe without channels sends
// nothing: the loop sends SUBSCRIBE (dialling first), so that a slow dial
// holds up no one; if it fails, the receive loop's reconnection sends it
// again (go-redis keeps the channel).
func (h *hub) subscribeLocked() *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscription{ps: h.c.Subscribe(ctx), ready: make(chan struct{}), refused: make(chan struct{}),
		cancel: cancel, done: make(chan struct{})}
	go h.loop(ctx, s)
	return s
}

// suspect is called when a waiter found by itself what a message should
// have told it (its renewal found that a release granted it the lock, or
// left the lock free with the waiter next): the message may be on its
// way, or lost for good to a deaf subscription (see hub). Unless a check
// runs or ran less than checkEvery ago, it checks the subscription in the
// background: a ping published on the channel through the client that
// the subscription does not hear within pingWait makes the hub subscribe
// anew. A ping that cannot be published tells nothing, and changes
// nothing.
func (h *hub) suspect() {
	h.mu.Lock()
	s := h.cur
	if h.closed || s == nil || !s.confirmed() || h.checking || time.Since(h.lastCheck) < checkEvery {
		h.mu.Unlock()
		return
	}
	h.checking, h.lastCheck = true, time.Now()
	h.pings++
	h.ping, h.pinged = pingMark+strconv.FormatInt(h.pings, 10), make(chan struct{})
	ping, pinged := h.ping, h.pinged
	h.mu.Unlock()
	go func() {
		defer func() {
			h.mu.Lock()
			h.checking, h.ping = false, ""
			h.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(h.stopCtx, pingWait)
		defer cancel()
		if err := pingScript.Run(ctx, h.c, nil, h.channel, ping).Err(); err != nil {
			return
		}
		select {
		case <-pinged:
			return // heard, even if after ctx's end (a client that does not heed ctx)
		default:
		}
		select {
		case <-pinged:
		case <-ctx.Done():
			h.renew(s)
		}
	}()
}

// renew replaces subscription old, which did not hear a ping, with a new
// one (unless the hub closed or old was replaced already); old's loop
// returns once its connection is closed.
func (h *hub) renew(old *subscription) {
	h.mu.Lock()
	if h.closed || h.cur != old {
		h.mu.Unlock()
		return
	}
	h.cur = h.subscribeLocked()
	h.cur.renewal = true
	h.renewals.Add(1)
	h.mu.Unlock()
	old.cancel()
	_ = old.ps.Close()
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

// loop subscribes, then receives messages and the subscription's
// confirmation until the pub/sub connection is closed or the server
// refuses the subscription.
func (h *hub) loop(ctx context.Context, s *subscription) {
	defer close(s.done)
	_ = s.ps.Subscribe(ctx, h.channel) // on failure Receive reconnects
	backoff := 50 * time.Millisecond
	for {
		// ctx ends a reconnection's dial when the hub closes.
		msg, err := s.ps.Receive(ctx)
		if err != nil {
			var re goredis.Error
			if errors.As(err, &re) && !errors.Is(err, goredis.ErrClosed) {
				// The server answered SUBSCRIBE with an error: no message
				// will ever arrive on this connection.
				h.refuse(s, err)
				return
			}
			h.mu.Lock()
			if h.cur != s && !h.closed {
				// Replaced (see renew): the new subscription goes on.
				h.mu.Unlock()
				return
			}
			stop := h.closed || errors.Is(err, goredis.ErrClosed)
			if stop && !h.closed {
				h.closed, h.err = true, fmt.Errorf("redis: pub/sub: %w", err)
				close(h.stopped)
				h.stop()
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
				if !s.confirmed() {
					close(s.ready)
					if s.renewal {
						// Messages were lost to the deaf one: every
						// waiter tries again.
						h.wakeAllLocked()
					}
				}
				h.mu.Unlock()
			}
		case *goredis.Message:
			if strings.HasPrefix(m.Payload, pingMark) {
				h.mu.Lock()
				if m.Payload == h.ping {
					close(h.pinged)
					h.ping = ""
				}
				h.mu.Unlock()
				continue
			}
			// "<owner>" (try again) or "<owner>:<token>" (granted).
			owner, tok, grant := strings.Cut(m.Payload, ":")
			h.mu.Lock()
			if w := h.waiters[owner]; w != nil {
				if grant {
					if t, err := strconv.ParseInt(tok, 10, 64); err == nil && t > 0 {
						w.token.Store(t)
					}
				}
				h.wakeups.Add(1)
				w.wake()
			}
			h.mu.Unlock()
		}
	}
}

// refuse ends subscription s, which the server refused with err: its
// waiters fail with err, and the next wait subscribes anew.
func (h *hub) refuse(s *subscription, err error) {
	h.mu.Lock()
	if h.cur == s {
		h.cur = nil
	}
	s.err = fmt.Errorf("redis: subscribe to the wake channel %q: %w", h.channel, mapErr(err))
	if errors.Is(s.err, backend.ErrPermission) {
		prefix := h.channel[:max(strings.LastIndex(h.channel, ":wake:"), 0)]
		s.err = fmt.Errorf("%w (an ACL user needs SUBSCRIBE and the channels &%s:*)", s.err, prefix)
	}
	close(s.refused)
	h.mu.Unlock()
	s.cancel()
	_ = s.ps.Close()
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
		h.stop()
	}
	s := h.cur
	h.wakeAllLocked()
	h.mu.Unlock()
	if s == nil {
		return nil
	}
	s.cancel()
	err := s.ps.Close()
	<-s.done
	if err != nil && !errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redis: close pub/sub: %w", err)
	}
	return nil
}
