package zookeeper

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// session is one *zk.Conn and what the adapter knows about it: the current
// ZooKeeper session (a generation: go-zookeeper replaces an expired session
// by a new one on the same Conn without telling its callers) and whether the
// connection is down (suspended).
type session struct {
	conn  *zk.Conn
	owned bool // the driver dialed it and closes it

	mu        sync.Mutex
	gen       *generation // current session; nil before the first and after an expiry
	suspended bool
	changed   chan struct{} // closed and replaced when suspended changes
	closed    bool
	stopPoll  chan struct{}
}

// generation is one ZooKeeper session of a Conn. Every node created in it is
// bound to it: when it ends (expired, replaced, closed) they are gone.
type generation struct {
	id      int64
	timeout time.Duration   // negotiated session timeout
	ctx     context.Context // ended with the session; its cause says how
	end     context.CancelCauseFunc

	mu    sync.Mutex
	proof time.Time // send time of the last request answered in this session
}

func newSession(owned bool) *session {
	return &session{owned: owned, changed: make(chan struct{}), suspended: true}
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

// onEvent is the Conn's event callback (owned sessions). It runs on the
// Conn's own goroutine: for StateHasSession right after the Conn stored the
// negotiated timeout, so reading it here does not race.
func (s *session) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.observe(ev.State)
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
			ctx, cancel := context.WithCancelCause(context.Background())
			s.gen = &generation{id: id, timeout: timeout, ctx: ctx, end: cancel}
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

// poll follows the state of a Conn whose events go to its owner (New):
// every pollInterval it compares the state and session id.
func (s *session) poll(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopPoll:
			return
		case <-t.C:
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
		}
	}
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
