package zookeeper

// The lease, one acquisition (one ephemeral sequential node): its state,
// and how it reports its loss to the Locker. The rest of it: acquire.go
// (Lock), create.go (our node), queue.go (the wait for our turn),
// ownwatch.go (the watch on our node), keepalive.go, proclaim.go,
// release.go, and lockdelay.go (the lock-delay marker).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
)

type state int

const (
	stIdle     state = iota // nothing created
	stCreating              // a create was sent; its outcome may be unknown
	stWaiting               // our node exists, queued behind older ones
	stHeld                  // our node exists and was granted
)

// lease implements driver.Lease: one acquisition, one ephemeral
// sequential node in the session g.
type lease struct {
	d    *zkDriver
	s    *session
	g    *generation
	dir  string
	data []byte
	guid string

	mu         sync.Mutex
	st         state
	path       string // our node, once known
	czxid      int64
	version    int32
	createDone chan struct{} // closed when the create's outcome is known
	createErr  error
	cleanup    chan struct{} // made when Release starts, closed when it has finished
	relErr     error
	watchTimer *time.Timer // arms the watch on our node (watchOwnSoon, rewatches)

	report func(cause error) // the Request's Lost: backend keeps the first

	// delay is the Request's LockDelay; sawMarker (Lock's goroutine alone)
	// that a children list held another acquisition's lock-delay marker;
	// relLost (under mu) that the release follows a loss (lockdelay.go).
	delay     time.Duration
	sawMarker bool
	relLost   bool
}

func newLease(d *zkDriver, s *session, g *generation, dir string, data []byte, delay time.Duration, report func(error)) *lease {
	var b [16]byte
	_, _ = rand.Read(b[:])
	l := &lease{d: d, s: s, g: g, dir: dir, data: data, guid: hex.EncodeToString(b[:]),
		delay: delay, report: report}
	// The session ending (expired, replaced, closed) takes our node with it.
	g.join(l)
	return l
}

// Suspended implements driver.Lease: whether the connection of the lease's
// session is down now.
func (l *lease) Suspended() (bool, <-chan struct{}) { return l.s.suspension() }

// markLost reports to the Locker that our node was seen deleted or our
// session ended. The Locker keeps the first report, fires the loss signal
// and ends a Lock in flight through its context, so the lease keeps no
// loss state of its own.
func (l *lease) markLost() { _ = l.markLostWhy("") }

// markLostWhy is markLost with the cause as the caller saw it: the
// session's end, with its cause, if it has ended or the Conn runs another
// one (backend.ErrSessionLost);
// else our node deleted (backend.ErrDeleted), why, or "deleted" if why is
// empty. It returns the loss error for the caller to return.
func (l *lease) markLostWhy(why string) error {
	cause := backend.ErrDeleted
	switch {
	case l.g.ended():
		cause, why = backend.ErrSessionLost, "its session ended: "+context.Cause(l.g.ctx).Error()
	case l.s.conn.SessionID() != l.g.id:
		// The Conn runs another session already, which the adapter has
		// not noticed yet (over a caller's Conn it polls): the node's
		// deletion is the old session's expiry, whose watch go-zookeeper
		// set again in the new one.
		cause, why = backend.ErrSessionLost, fmt.Sprintf("its session %#x ended (the connection runs session %#x now)", l.g.id, l.s.conn.SessionID())
	case why == "":
		why = "deleted"
	}
	err := l.s.closedErr(l.lostError(cause, why))
	l.report(err)
	return err
}

// markSessionLost reports the loss of the lease to the Locker, as
// markLost does, because its session ended or was replaced (why), and
// returns the loss error.
func (l *lease) markSessionLost(why string) error {
	if l.g.ended() {
		why += ": " + context.Cause(l.g.ctx).Error()
	}
	err := l.s.closedErr(l.lostError(backend.ErrSessionLost, why))
	l.report(err)
	return err
}

// lostError is the loss of our node, for cause (backend.ErrDeleted or
// ErrSessionLost), as why says.
func (l *lease) lostError(cause error, why string) error {
	l.mu.Lock()
	path := l.path
	l.mu.Unlock()
	if path == "" {
		path = l.dir + "/" + protectedPrefix + l.guid + "-" + lockMarker + "*"
	}
	return fmt.Errorf("%w: zookeeper: lock node %s: %s", cause, path, why)
}

// alive checks, after a reply, that it came from our session.
func (l *lease) alive(sent time.Time) bool {
	if l.s.conn.SessionID() != l.g.id || l.g.ended() {
		return false
	}
	l.g.noteAlive(sent)
	return true
}

// opError maps a request's error: a gone session is a lost lease.
func (l *lease) opError(what string, err error) error {
	if sessionGone(err) || l.g.ended() {
		return l.markSessionLost("the session ended")
	}
	if errors.Is(err, zk.ErrClosing) {
		return fmt.Errorf("zookeeper: %s: %w", what, errConnClosed)
	}
	return fmt.Errorf("zookeeper: %s: %w", what, mapErr(err))
}

// releasedLocked reports whether Release has started; l.mu must be held.
func (l *lease) releasedLocked() bool { return l.cleanup != nil }
