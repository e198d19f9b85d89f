package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
)

// errClientClosed is the error of every call on a caller's Conn (New) that
// its owner closed.
var errClientClosed = fmt.Errorf("%w: zookeeper: the caller's Conn was closed", backend.ErrClientClosed)

// session is one *zk.Conn and what the adapter knows about it: the current
// ZooKeeper session (a generation: go-zookeeper replaces an expired session
// by a new one on the same Conn without telling its callers) and whether the
// connection is down (suspended).
type session struct {
	conn  *zk.Conn
	owned bool // the driver dialed it and closes it
	// quit is closed when the caller closes its Conn (New; nil for a Conn
	// the driver dialed): see connQuit.
	quit <-chan struct{}

	mu        sync.Mutex
	gen       *generation // current session; nil before the first and after an expiry
	suspended bool
	changed   chan struct{} // closed and replaced when suspended changes
	closed    bool
	stopPoll  chan struct{}

	// own holds, by path, the lock nodes of this Conn's leases that watch
	// their own node, so that one dispatcher serves every such watch: the
	// Conn's event callback on a Conn the driver dialed (owned), the poll
	// loop on a caller's Conn (see dispatchOwn and pollOwn).
	ownMu sync.Mutex
	own   map[string]ownWatch
}

// ownWatch is a lease's data watch on its own node, as the session
// dispatches it.
type ownWatch struct {
	l *lease
	// ch is the watch's channel, for the poll loop of a caller's Conn
	// (nil on a Conn whose events reach the callback, and until set).
	ch <-chan zk.Event
}

// generation is one ZooKeeper session of a Conn. Every node created in it is
// bound to it: when it ends (expired, replaced, closed) they are gone.
type generation struct {
	id      int64
	timeout time.Duration   // negotiated session timeout
	ctx     context.Context // ended with the session; its cause says how
	end     context.CancelCauseFunc

	mu     sync.Mutex
	proof  time.Time           // send time of the last request answered in this session
	leases map[*lease]struct{} // not yet released: its end loses them (join)
}

// newGeneration returns the generation of session id, whose end loses
// every lease that joined it.
func newGeneration(id int64, timeout time.Duration) *generation {
	ctx, cancel := context.WithCancelCause(context.Background())
	g := &generation{id: id, timeout: timeout, ctx: ctx, end: cancel, leases: make(map[*lease]struct{})}
	context.AfterFunc(ctx, g.loseAll)
	return g
}

// join makes the end of g report the loss of l (at once if g has ended).
// One callback per generation rather than one per lease keeps a held lease
// small.
func (g *generation) join(l *lease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leases == nil { // ended
		go l.markLost()
		return
	}
	g.leases[l] = struct{}{}
}

// leave stops g's end from reporting l (released).
func (g *generation) leave(l *lease) {
	g.mu.Lock()
	delete(g.leases, l)
	g.mu.Unlock()
}

// loseAll reports the loss of every lease of g, which has ended.
func (g *generation) loseAll() {
	g.mu.Lock()
	leases := g.leases
	g.leases = nil
	g.mu.Unlock()
	for l := range leases {
		l.markLost()
	}
}

func newSession(owned bool) *session {
	return &session{owned: owned, changed: make(chan struct{}), suspended: true,
		own: make(map[string]ownWatch)}
}

// addOwn registers l's watch on its node at path, whose channel is ch if
// the watch is set and the session polls it (nil otherwise). On a Conn
// whose events reach the callback, register before the watch is set, so
// that no event of it arrives unregistered.
func (s *session) addOwn(path string, l *lease, ch <-chan zk.Event) {
	if s.owned {
		ch = nil // the callback dispatches; the channel is not read
	}
	s.ownMu.Lock()
	s.own[path] = ownWatch{l: l, ch: ch}
	s.ownMu.Unlock()
}

// dropOwn unregisters the watch on path, if l registered it.
func (s *session) dropOwn(path string, l *lease) {
	s.ownMu.Lock()
	if w, ok := s.own[path]; ok && w.l == l {
		delete(s.own, path)
	}
	s.ownMu.Unlock()
}

// ownOf returns the lease whose own node is path, if it watches it.
func (s *session) ownOf(path string) *lease {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	return s.own[path].l
}

// dispatchOwn hands ev, a watch event of the Conn, to the lease whose own
// node it concerns, if any. It runs on the Conn's receive goroutine (the
// event callback), before the event reaches the watch's channel.
func (s *session) dispatchOwn(ev zk.Event) {
	if l := s.ownOf(ev.Path); l != nil {
		l.ownWatchFired(ev)
	}
}

// pollOwn hands the events that arrived on the polled watch channels to
// their leases (a caller's Conn, whose events go to the caller).
func (s *session) pollOwn() {
	type fired struct {
		l  *lease
		ev zk.Event
	}
	var got []fired
	s.ownMu.Lock()
	for path, w := range s.own {
		if w.ch == nil {
			continue
		}
		select {
		case ev := <-w.ch:
			got = append(got, fired{w.l, ev})
			s.own[path] = ownWatch{l: w.l} // a watch fires once
		default:
		}
	}
	s.ownMu.Unlock()
	for _, f := range got {
		f.l.ownWatchFired(f.ev)
	}
}

// noteAlive records that a request sent at sent was answered in g.
func (g *generation) noteAlive(sent time.Time) {
	g.mu.Lock()
	if sent.After(g.proof) {
		g.proof = sent
	}
	g.mu.Unlock()
}

func (g *generation) lastProof() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.proof
}

func (g *generation) ended() bool { return g.ctx.Err() != nil }

// onEvent is the Conn's event callback (owned sessions): session events
// update the session, watch events on the leases' own nodes go to them. It
// runs on the Conn's own goroutines: for StateHasSession right after the
// Conn stored the negotiated timeout, so reading it here does not race; for
// a watch event before the event reaches the watch's channel; for the
// watches a session's end invalidates with the Conn's watcher lock held, so
// it must not send requests.
func (s *session) onEvent(ev zk.Event) {
	switch {
	case ev.Type == zk.EventSession:
		s.observe(ev.State)
	case ev.Path != "":
		s.dispatchOwn(ev)
	}
}

// observe updates the session from the Conn's state.
func (s *session) observe(st zk.State) {
	conn := s.conn
	if conn == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	switch st {
	case zk.StateHasSession:
		id := conn.SessionID()
		if s.gen == nil || s.gen.id != id {
			if s.gen != nil {
				s.gen.end(fmt.Errorf("session %#x was replaced by session %#x", s.gen.id, id))
			}
			timeout, _ := negotiatedTimeout(conn)
			s.gen = newGeneration(id, timeout)
		}
		s.setSuspendedLocked(false)
	case zk.StateExpired:
		if s.gen != nil {
			s.gen.end(fmt.Errorf("session %#x expired", s.gen.id))
			s.gen = nil
		}
		s.setSuspendedLocked(true)
	case zk.StateDisconnected, zk.StateConnecting, zk.StateConnected, zk.StateAuthFailed:
		s.setSuspendedLocked(true)
	}
}

func (s *session) setSuspendedLocked(on bool) {
	if s.suspended == on {
		return
	}
	s.suspended = on
	close(s.changed)
	s.changed = make(chan struct{})
}

// suspension returns whether the connection is down and a channel closed at
// the next change.
func (s *session) suspension() (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.suspended, s.changed
}

// current returns the current generation, waiting for one (the first
// session, or a new one after an expiry) until ctx ends.
func (s *session) current(ctx context.Context) (*generation, error) {
	for {
		s.mu.Lock()
		g, changed, closed := s.gen, s.changed, s.closed
		s.mu.Unlock()
		switch {
		case s.ownerClosed():
			return nil, errClientClosed
		case closed:
			return nil, errConnClosed
		case g != nil && !g.ended():
			return g, nil
		}
		// No session yet, or it expired: a new one flips suspended.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
}

// ownerClosed reports whether the caller closed its Conn (New): then every
// call fails with errClientClosed.
func (s *session) ownerClosed() bool {
	if s.quit == nil {
		return false
	}
	select {
	case <-s.quit:
		return true
	default:
		return false
	}
}

// closedErr returns err, wrapped in errClientClosed if the caller closed
// its Conn: go-zookeeper then fails requests with ErrConnectionClosed or
// ErrClosing, which a connection that is only down returns too.
func (s *session) closedErr(err error) error {
	if err == nil || !s.ownerClosed() || errors.Is(err, backend.ErrClientClosed) {
		return err
	}
	return fmt.Errorf("%w: %w", errClientClosed, err)
}

// connQuit returns the channel that conn's Close closes. go-zookeeper
// keeps it in an unexported field (shouldQuit) and tells a closed Conn from
// one that is only disconnected in no other way (both fail requests with
// ErrConnectionClosed and report StateDisconnected), so it is read by
// reflection, as negotiatedTimeout is; nil if this version of go-zookeeper
// has no such field (a closed Conn is then told as a connection that is
// down). The closed-client tests (TestClientClosed) pin it.
func connQuit(conn *zk.Conn) <-chan struct{} {
	v := reflect.ValueOf(conn).Elem().FieldByName("shouldQuit")
	if !v.IsValid() || v.Type() != reflect.TypeOf((chan struct{})(nil)) {
		return nil
	}
	return *(*chan struct{})(unsafe.Pointer(v.UnsafeAddr()))
}

// poll follows the state of a Conn whose events go to its owner (New):
// every pollInterval it compares the state and session id, and hands the
// events of the leases' watches on their own nodes to them (pollOwn).
func (s *session) poll(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopPoll:
			return
		case <-t.C:
			if s.ownerClosed() {
				s.closedByOwner()
				return
			}
			st := s.conn.State()
			if st == zk.StateHasSession {
				s.mu.Lock()
				g := s.gen
				s.mu.Unlock()
				if g != nil && g.id != s.conn.SessionID() {
					s.observe(zk.StateExpired) // replaced behind our back
				}
			}
			s.observe(st)
			s.pollOwn()
		}
	}
}

// closedByOwner ends the generation of a caller's Conn that its owner
// closed (which closed the ZooKeeper session: the server deleted its
// ephemeral nodes), so that its leases are lost at once, and wakes the
// calls waiting for a session, which then fail with errClientClosed.
func (s *session) closedByOwner() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != nil {
		s.gen.end(fmt.Errorf("session %#x: %w", s.gen.id, errClientClosed))
		s.gen = nil
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// close ends the session's generation and, if owned, closes the Conn (which
// closes the ZooKeeper session: the server deletes its ephemeral nodes).
func (s *session) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.gen != nil {
		s.gen.end(fmt.Errorf("session %#x was closed", s.gen.id))
	}
	close(s.changed) // wakes current, which then sees closed
	s.changed = make(chan struct{})
	stop := s.stopPoll
	s.mu.Unlock()
	if stop != nil {
		close(stop)
	}
	if s.owned {
		s.conn.Close()
	}
}

// abandon closes a session that never got going (its dial failed): as
// close, but the Conn is closed in the background, since go-zookeeper's
// Close waits up to a second for a session that a silent server never
// grants, and there is no server-side session to end.
func (s *session) abandon() {
	owned := s.owned
	s.owned = false
	s.close()
	if owned && s.conn != nil {
		go s.conn.Close()
	}
}

// negotiatedTimeout returns the session timeout the server granted to conn.
// go-zookeeper keeps it in an unexported field and has no accessor, so it
// is read by reflection; ok is false if this version of go-zookeeper has no
// such field (then the adapter refuses to guess). negotiated_test.go pins
// the field and checks the value against the server's record of the
// session, so an upgrade that breaks this fails there by name. Call it on
// the Conn's goroutine (an event callback) or after observing
// StateHasSession.
func negotiatedTimeout(conn *zk.Conn) (time.Duration, bool) {
	v := reflect.ValueOf(conn).Elem().FieldByName("sessionTimeoutMs")
	if !v.IsValid() || v.Kind() != reflect.Int32 {
		return 0, false
	}
	return time.Duration(v.Int()) * time.Millisecond, true
}

// NegotiatedTimeout returns the session timeout the ZooKeeper server granted
// to conn's current session, which go-zookeeper does not expose. It waits up
// to wait for conn to have a session. A Locker's TTL is this timeout.
func NegotiatedTimeout(conn *zk.Conn, wait time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(wait)
	for conn.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("zookeeper: no session within %v (state %v)", wait, conn.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
	d, ok := negotiatedTimeout(conn)
	if !ok || d <= 0 {
		return 0, fmt.Errorf("zookeeper: cannot read the negotiated session timeout from this go-zookeeper version")
	}
	return d, nil
}
