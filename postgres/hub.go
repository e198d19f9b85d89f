package postgres

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// closeTimeout bounds the listener connection's goodbye to the server
// (a Terminate message, best effort), so that Shutdown returns soon even
// when the server cannot be reached.
const closeTimeout = 100 * time.Millisecond

// hub is a driver's listener: one connection of its own (LISTEN needs a
// session, which a pooled or transaction-mode connection does not keep),
// opened when the driver's first acquisition waits and kept until the
// driver shuts down, listening on the driver's channel, where releases
// notify when they grant the lock to one of its waiters ("g:<owner>:<token>")
// and revocations name the acquisition they ended ("r:<owner>"). A
// notification wakes the one acquisition it names. Each time the listener
// (re)connects, every registered waiter is woken to try again, since a
// notification may have been missed meanwhile. If it cannot connect, it
// tries again with a backoff, and the waiters rely on their timers and
// renewals.
type hub struct {
	cfg     *pgx.ConnConfig
	before  func(context.Context, *pgx.ConnConfig) error // a pool's BeforeConnect, or nil
	channel string
	wakeups *atomic.Int64

	mu      sync.Mutex
	members map[string]*lease // waiting and holding acquisitions, by owner id
	up      bool              // LISTEN is in effect (for the tests: listening)
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func newHub(cfg *pgx.ConnConfig, before func(context.Context, *pgx.ConnConfig) error, channel string, wakeups *atomic.Int64) *hub {
	return &hub{cfg: cfg, before: before, channel: channel, wakeups: wakeups, members: make(map[string]*lease)}
}

// add registers l, a waiter (starting the listener if it is not running)
// or a holder.
func (h *hub) add(l *lease, waiting bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.members[l.owner] = l
	if waiting {
		if !h.started {
			h.started = true
			ctx, cancel := context.WithCancel(context.Background())
			h.cancel, h.done = cancel, make(chan struct{})
			go h.loop(ctx)
		}
	}
}

// remove unregisters l: a wait that ended without a grant, or a release.
func (h *hub) remove(l *lease) {
	h.mu.Lock()
	if h.members[l.owner] == l {
		delete(h.members, l.owner)
	}
	h.mu.Unlock()
}

// loop connects, listens and delivers notifications until the hub closes.
func (h *hub) loop(ctx context.Context) {
	defer close(h.done)
	backoff := 50 * time.Millisecond
	for {
		if h.listen(ctx) {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// listen runs one listener connection until it fails or ctx ends; it
// reports whether LISTEN took effect.
func (h *hub) listen(ctx context.Context) bool {
	cfg := h.cfg
	if h.before != nil {
		cfg = h.cfg.Copy()
		if err := h.before(ctx, cfg); err != nil {
			return false
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_ = conn.Close(cctx)
		cancel()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{h.channel}.Sanitize()); err != nil {
		return false
	}
	h.mu.Lock()
	h.up = true
	// A notification may have been sent while nobody listened.
	for _, l := range h.members {
		l.wake()
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.up = false
		h.mu.Unlock()
	}()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		h.deliver(n.Payload)
	}
}

// deliver hands a notification to the acquisition it names.
func (h *hub) deliver(payload string) {
	kind, rest, _ := strings.Cut(payload, ":")
	owner, tok := rest, ""
	if kind == "g" {
		if i := strings.LastIndexByte(rest, ':'); i >= 0 {
			owner, tok = rest[:i], rest[i+1:]
		}
	}
	h.mu.Lock()
	l := h.members[owner]
	h.mu.Unlock()
	if l == nil {
		return
	}
	switch kind {
	case "g":
		t, err := strconv.ParseInt(tok, 10, 64)
		if err != nil || t <= 0 {
			return
		}
		h.wakeups.Add(1)
		l.notified(true, t)
	case "r":
		l.notified(false, 0)
	}
}

// close stops the listener and waits for it.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	cancel, done := h.cancel, h.done
	for _, l := range h.members {
		l.wake()
	}
	h.members = map[string]*lease{}
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
