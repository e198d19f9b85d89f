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
//
// On a Redis Cluster, a PUBLISH reaches the subscribers of the other nodes
// over the cluster bus, whose links Redis opens without TCP_NODELAY: a
// message that follows another one on a link within the peer's delayed
// ACK waits for that ACK, 30-40 ms on Linux (redis/redis#11869,
// valkey-io/valkey#1758; measured here, a tenth of the messages between
// two nodes took 30 ms). A release publishes on its lock's master, so the
// hub of a cluster client also subscribes to its channel on every other
// master (local subscriptions), where the release's own master delivers
// the message at once. They only speed delivery up: the hub's own
// subscription (on the master of the channel's slot) still receives every
// message, over the bus, and decides when a waiter is ready or refused;
// a local subscription that fails wakes and fails no one, and a master
// that is not subscribed yet (one made by a failover, until the next
// refresh, localRefresh after the last) is heard through the bus. A
// message thus arrives once per subscribed master: a grant's copies wake
// its waiter once; a "try again" copy that finds its waiter still waiting
// costs it one more attempt.
type hub struct {
	c       Client
	channel string
	wakeups *atomic.Int64
	// masters is the client if it is a cluster client, for the local
	// subscriptions; nil: none.
	masters clusterMasters
	// localMsgs counts the messages the local subscriptions received, for
	// the tests.
	localMsgs atomic.Int64

	mu      sync.Mutex
	cur     *subscription   // nil until the first wait, and after a refusal
	waiters map[string]*sub // by owner id
	closed  bool
	err     error         // why the hub stopped (client closed)
	stopped chan struct{} // closed when the hub stops
	// local are the local subscriptions by master address; refreshed is
	// when they were last matched to the masters (zero: never), and
	// refreshDone is closed when the refresh under way (refreshing) ends.
	local       map[string]*localSub
	refreshed   time.Time
	refreshing  bool
	refreshDone chan struct{}
	// ctx ends when the hub stops (closed, or its client closed): the
	// local subscriptions, their refresh, a check's ping.
	ctx    context.Context
	cancel context.CancelFunc
	// The check (see suspect): one at a time, checkEvery apart at least.
	checking  bool
	lastCheck time.Time
	pings     int64         // the checks' pings so far
	ping      string        // the payload of the ping in flight
	pinged    chan struct{} // closed when it arrives
	renewals  atomic.Int64  // subscriptions replaced after a check (for tests)
}

// clusterMasters is a cluster client (go-redis's *ClusterClient): it
// lists the masters, each with a client of its own, and names the master
// of a key's slot.
type clusterMasters interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *goredis.Client) error) error
	MasterForKey(ctx context.Context, key string) (*goredis.Client, error)
}

// localRefresh is how often at most a hub matches its local subscriptions
// to the cluster's masters, when a wait begins: each match asks a node for
// the slots (CLUSTER SLOTS).
const localRefresh = 30 * time.Second

// localRetryMax caps the backoff of a local subscription whose connection
// fails.
const localRetryMax = 5 * time.Second

// localSub is one local subscription: the hub's channel on one master.
type localSub struct {
	ps     *goredis.PubSub
	cancel context.CancelFunc
	done   chan struct{} // closed when its receive loop has returned
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
	h := &hub{c: c, channel: channel, wakeups: wakeups, waiters: make(map[string]*sub),
		stopped: make(chan struct{}), local: make(map[string]*localSub)}
	h.masters, _ = c.(clusterMasters)
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
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
	if h.masters != nil && !h.refreshing && time.Since(h.refreshed) >= localRefresh {
		h.refreshing = true
		h.refreshDone = make(chan struct{})
		go h.refreshLocal(h.refreshDone)
	}
	return s, nil
}

// refreshLocal matches the local subscriptions to the cluster's masters
// now: one on each master but the one of the hub's own subscription (the
// master of the channel's slot). It closes done when it returns.
func (h *hub) refreshLocal(done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	masters := map[string]*goredis.Client{}
	err := h.masters.ForEachMaster(ctx, func(_ context.Context, c *goredis.Client) error {
		mu.Lock()
		masters[c.Options().Addr] = c
		mu.Unlock()
		return nil
	})
	var own string
	if c, err := h.masters.MasterForKey(ctx, h.channel); err == nil {
		own = c.Options().Addr
	}
	var stale []*localSub
	defer func() {
		for _, l := range stale { // not under h.mu: Close waits for a dial in progress
			l.cancel()
			_ = l.ps.Close()
		}
	}()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refreshing, h.refreshed = false, time.Now()
	if err != nil || h.closed {
		return // the next wait after localRefresh tries again
	}
	for addr, l := range h.local {
		if _, ok := masters[addr]; !ok || addr == own {
			stale = append(stale, l)
			delete(h.local, addr)
		}
	}
	for addr, c := range masters {
		if addr == own || h.local[addr] != nil {
			continue
		}
		lctx, cancel := context.WithCancel(h.ctx)
		l := &localSub{ps: c.Subscribe(lctx), cancel: cancel, done: make(chan struct{})}
		h.local[addr] = l
		go h.localLoop(lctx, addr, l)
	}
}

// localLoop subscribes l to the hub's channel on its master, then hands
// the messages it receives to the waiters, until the hub closes or the
// master refuses the subscription or goes away (its client closed); then
// the next refresh subscribes anew. A broken connection is dialled again
// (go-redis subscribes again), after a backoff.
func (h *hub) localLoop(ctx context.Context, addr string, l *localSub) {
	defer close(l.done)
	defer func() {
		h.mu.Lock()
		if h.local[addr] == l {
			delete(h.local, addr)
		}
		h.mu.Unlock()
		l.cancel()
		_ = l.ps.Close()
	}()
	_ = l.ps.Subscribe(ctx, h.channel) // on failure Receive reconnects
	backoff := 50 * time.Millisecond
	for {
		msg, err := l.ps.Receive(ctx)
		if err != nil {
			var re goredis.Error
			if ctx.Err() != nil || errors.Is(err, goredis.ErrClosed) || errors.As(err, &re) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, localRetryMax)
			continue
		}
		backoff = 50 * time.Millisecond
		if m, ok := msg.(*goredis.Message); ok {
			h.localMsgs.Add(1)
			h.deliver(m.Payload)
		}
	}
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
		ctx, cancel := context.WithTimeout(h.ctx, pingWait)
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
				h.closed, h.err = true, fmt.Errorf("redis: pub/sub: %w", mapErr(err))
				close(h.stopped)
				h.cancel()
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
			h.deliver(m.Payload)
		}
	}
}

// deliver hands a message to the waiter it names: "<owner>" (try again)
// or "<owner>:<token>" (granted). The copy of a grant the waiter was
// already told of (a local subscription's, see hub) is dropped.
func (h *hub) deliver(payload string) {
	owner, tok, grant := strings.Cut(payload, ":")
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.waiters[owner]
	if w == nil {
		return
	}
	if grant {
		if t, err := strconv.ParseInt(tok, 10, 64); err == nil && t > 0 {
			if w.token.Swap(t) == t {
				return
			}
		}
	}
	h.wakeups.Add(1)
	w.wake()
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
		h.cancel()
	}
	s := h.cur
	h.wakeAllLocked()
	local := make([]*localSub, 0, len(h.local))
	for _, l := range h.local {
		local = append(local, l)
	}
	refreshing := h.refreshDone
	h.mu.Unlock()
	h.cancel()
	if refreshing != nil {
		<-refreshing
	}
	for _, l := range local {
		_ = l.ps.Close()
		<-l.done
	}
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
