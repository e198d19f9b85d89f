package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

// ownWatchDelay is how long a lock granted without waiting must have been
// held before the lease watches our node (a data watch that reports the
// loss when it is deleted). Most uncontended holds are over sooner, and the watch
// would cost them a request; a deletion is still seen within this delay
// (and by the next renewal in any case). A waiter watches its node from the
// start of its wait, and keeps that watch once granted.
const ownWatchDelay = 50 * time.Millisecond

// ownRewatchMax caps the backoff of a watch on our node that could not be
// set because the connection was down.
const ownRewatchMax = time.Second

// createAttempts bounds the create retries (missing parents, a lost reply).
const createAttempts = 8

// cleanupRetryMax caps the backoff of a release that cannot reach the
// server.
const cleanupRetryMax = time.Second

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

// Lock implements driver.Lease.
//
// Round trips: one Multi creates our node and returns its czxid (1) and
// whether it is alone in the directory; if not, one getChildren (1) tells
// whether it is first; a TryAcquire that is not first then deletes its
// node (1, Release). TryAcquire does not read the children first: a
// server answers reads from its own copy, which may lag the leader's, so a
// lock released through another server could still look held there; what
// a read finds after our own create (a write, through the leader) is
// current. A waiter then waits as waitFirst says. An Acquire that follows
// one that waited creates with a plain create instead (1, no czxid) and
// always reads the children; its czxid comes with the watch on its node,
// or from one exists if it does not wait.
func (l *lease) Lock(ctx context.Context, wait bool) (driver.Grant, error) {
	token, sent, err := l.lock(ctx, wait)
	if err != nil && l.s.ownerClosed() {
		return driver.Grant{}, l.s.closedErr(err)
	}
	if err != nil && ctx.Err() != nil && !errors.Is(err, backend.ErrLeaseLost) && !errors.Is(err, backend.ErrNotAcquired) {
		l.mu.Lock()
		queued := l.st == stWaiting
		l.mu.Unlock()
		suspended, _ := l.s.suspension()
		switch {
		case queued && suspended:
			// Queued, but the connection is down now: who holds the
			// lock is unknown.
			return driver.Grant{}, fmt.Errorf("%w: zookeeper: queued in %s, then disconnected: %w", backend.ErrUnavailable, l.dir, err)
		case queued:
			// Our node was created, behind another, before ctx ended.
			return driver.Grant{}, fmt.Errorf("%w: zookeeper: queued in %s: %w", backend.ErrNotAcquired, l.dir, err)
		}
	}
	return driver.Grant{Token: token, Sent: sent}, err
}

func (l *lease) lock(ctx context.Context, wait bool) (fencing.Token, time.Time, error) {
	l.mu.Lock()
	if l.st != stIdle || l.createDone != nil {
		l.mu.Unlock()
		return 0, time.Time{}, errors.New("zookeeper: Lock called twice on one acquisition")
	}
	l.mu.Unlock()

	sent := time.Now()
	first, err := l.create(ctx, wait && l.d.wasContended(l.dir))
	if err != nil {
		return 0, time.Time{}, err
	}
	l.mu.Lock()
	path := l.path
	l.st = stWaiting
	l.mu.Unlock()
	name := path[strings.LastIndexByte(path, '/')+1:]
	seq, ok := lockSeq(name)
	if !ok {
		return 0, time.Time{}, fmt.Errorf("zookeeper: created node %s has no sequence suffix", path)
	}

	own, err := l.waitFirst(ctx, first, name, seq, wait)
	if err != nil {
		return 0, time.Time{}, err
	}
	if wait {
		l.d.noteContended(l.dir, own != nil) // a waiter has the watch
	}
	l.mu.Lock()
	czxid := l.czxid // from the watch on our node, after a plain create
	l.mu.Unlock()
	if czxid == 0 {
		if czxid, err = l.readCzxid(ctx, path); err != nil {
			return 0, time.Time{}, err
		}
	}
	l.mu.Lock()
	l.st = stHeld
	l.mu.Unlock()
	if own != nil {
		l.watchOwn(own) // the watch the wait set, still armed
	} else {
		l.watchOwnSoon()
	}
	if err := l.afterGrant(ctx, wait); err != nil {
		return 0, time.Time{}, err
	}
	return fencing.Token(czxid), sent, nil
}

// watchOwnSoon arranges for our node to be watched once it has existed for
// ownWatchDelay (unless released before).
func (l *lease) watchOwnSoon() {
	l.armOwnAfter(ownWatchDelay, 0)
}

// waitFirst returns once our node (name, with sequence number seq) is the
// first lock node of the directory; first is the children read with the
// create, if any. Without wait it returns ErrNotAcquired if another node is
// ahead.
//
// It watches the node right ahead of ours (pred) and, when two or more are
// ahead, the one ahead of that (pred2). Sequence numbers only grow, so no
// node can join ahead of ours: when pred was the only node ahead and goes,
// ours is first without a read; when pred2 goes and only pred was left
// ahead of it, pred is alone ahead. A node that goes otherwise (a waiter
// ahead gave up) makes it read the children again. Watches stay set across
// reads, so a predecessor is watched once.
//
// While it waits it also watches our own node, on this goroutine: the
// client delivers events in the server's order, so when the predecessor's
// deletion arrives, a deletion of our node before it (a revocation, or an
// operator's delete) has already arrived, and we never take the lock
// without a node. own is that watch, still armed, for the holder's loss
// signal (nil if it did not wait); its request also brings our node's
// czxid (noteCzxid).
func (l *lease) waitFirst(ctx context.Context, first []string, name string, seq int64, wait bool) (own <-chan zk.Event, err error) {
	watches := make(map[string]<-chan zk.Event)
	for {
		kids, err := first, error(nil)
		if kids == nil {
			kids, err = l.children(ctx)
		}
		first = nil
		l.notePeers(kids)
		if err != nil {
			if l.retryLater(ctx, err) {
				continue
			}
			return nil, err
		}
		found, pred, pred2, ahead := queuePosition(kids, name, seq)
		if !found {
			return nil, l.markLostWhy("deleted while waiting")
		}
		if pred == "" {
			return watches[name], nil
		}
		if !wait {
			return nil, fmt.Errorf("%w: zookeeper: %s is held (%s is before us)", backend.ErrNotAcquired, l.dir, pred)
		}
		for {
			second := ""
			if ahead >= 2 {
				second = pred2
			}
			gone, err := l.waitGone(ctx, watches, name, pred, second)
			if err != nil {
				if !l.retryLater(ctx, err) {
					return nil, err
				}
				break
			}
			if gone == pred && ahead == 1 {
				if l.g.ended() {
					return nil, l.markLostWhy("")
				}
				// A loss another goroutine reported meanwhile (a
				// renewal that found our node gone) is not checked
				// here: the Locker refuses a grant to a lease it
				// already lost, under the same lock that records it.
				return watches[name], nil
			}
			if gone == pred2 && ahead == 2 {
				ahead, pred2 = 1, ""
				continue
			}
			break // read the children again
		}
	}
}

// queuePosition finds our node (name, sequence seq) among the directory's
// children: pred is the lock node right ahead of it, pred2 the one ahead of
// pred, ahead how many lock nodes are ahead. Children that are not lock
// nodes are ignored.
func queuePosition(kids []string, name string, seq int64) (found bool, pred, pred2 string, ahead int) {
	var predSeq, pred2Seq int64 = -1, -1
	for _, k := range kids {
		if k == name {
			found = true
			continue
		}
		if s, ok := lockSeq(k); ok && s < seq {
			ahead++
			switch {
			case s > predSeq:
				pred, predSeq, pred2, pred2Seq = k, s, pred, predSeq
			case s > pred2Seq:
				pred2, pred2Seq = k, s
			}
		}
	}
	return found, pred, pred2, ahead
}

// waitGone waits until the node named node, or second if not empty (both
// children of our directory), is deleted or found missing, our session
// ends, or ctx ends (the Locker ends it when the lease is lost). It sets a
// data watch on each, and on our own node (self), unless watches already
// holds one. A write to node's or second's data (a candidate holding the
// lock proclaimed a new value, or another client wrote it) fires its watch
// but changes nothing in the queue: the watch is set again and the wait
// goes on. gone is the node that went, or empty if the watch on our own
// node fired for a write: read the queue again. Our own node found
// deleted, now or before the event that woke us, is a lost lease.
func (l *lease) waitGone(ctx context.Context, watches map[string]<-chan zk.Event, self, node, second string) (gone string, err error) {
	for {
		// Our own node first: once its watch is set, whatever happens
		// to it reaches us before anything later happens to the others.
		for _, n := range []string{self, node, second} {
			if _, ok := watches[n]; ok || n == "" {
				continue
			}
			if n == self {
				// Registered before the watch is set: the
				// dispatcher then reports a deletion even if it
				// comes between the grant and watchOwn.
				// (Release, which would refuse it, comes only
				// after Lock.)
				l.registerOwn(nil)
			}
			var ch <-chan zk.Event
			var st *zk.Stat
			sent := time.Now()
			err := call(ctx, func() error {
				var err error
				_, st, ch, err = l.s.conn.GetW(l.dir + "/" + n)
				return err
			})
			switch {
			case errors.Is(err, zk.ErrNoNode):
				if !l.alive(sent) {
					return "", l.lostError(backend.ErrSessionLost, "the session ended")
				}
				if n == self {
					return "", l.markLostWhy("deleted while waiting")
				}
				return l.ownFirst(watches, self, n)
			case err != nil:
				return "", l.opError("watch "+n, err)
			}
			if !l.alive(sent) {
				return "", l.lostError(backend.ErrSessionLost, "the session ended")
			}
			if n == self {
				l.noteCzxid(st)
			}
			watches[n] = ch
		}
		var ev zk.Event
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-l.g.ctx.Done():
			return "", l.markLostWhy("")
		case ev = <-watches[node]:
			gone = node
		case ev = <-watches[second]: // nil (never ready) when second is empty
			gone = second
		case ev = <-watches[self]:
			gone = self
		}
		delete(watches, gone) // a watch fires once
		if gone != self {
			if g, err := l.ownFirst(watches, self, gone); g == "" || err != nil {
				return g, err
			}
		}
		switch {
		case gone == self:
			return "", l.ownEvent(ev) // nil for a data change: read again
		case ev.Type == zk.EventNodeDeleted:
			return gone, nil
		case ev.Type == zk.EventNotWatching:
			if l.g.ended() || sessionGone(ev.Err) {
				return "", l.markSessionLost("the session ended while waiting")
			}
			return "", fmt.Errorf("%w: zookeeper: watch on %s ended: %w", backend.ErrUnavailable, gone, ev.Err)
		}
		// gone's data changed (EventNodeDataChanged): it is still
		// there, in the same place; the next round watches it again.
	}
}

// noteCzxid records our node's czxid from st, its Stat, if a plain create
// left it unknown.
func (l *lease) noteCzxid(st *zk.Stat) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.czxid == 0 && st != nil {
		l.czxid = st.Czxid
	}
}

// readCzxid reads the czxid of our node (path) after a plain create that
// did not wait (1 round trip).
func (l *lease) readCzxid(ctx context.Context, path string) (int64, error) {
	var st *zk.Stat
	var ok bool
	sent := time.Now()
	err := call(ctx, func() error {
		var err error
		ok, st, err = l.s.conn.Exists(path)
		return err
	})
	switch {
	case err != nil:
		return 0, l.opError("read czxid of "+path, err)
	case !l.alive(sent):
		return 0, l.lostError(backend.ErrSessionLost, "the session ended")
	case !ok:
		return 0, l.markLostWhy("deleted before the grant")
	}
	l.noteCzxid(st)
	return st.Czxid, nil
}

// ownFirst returns gone, the node found deleted, unless an event on our own
// node came first: the client delivers events and replies in the server's
// order, so such an event is in the channel of our node's watch already. A
// deletion of our node is a lost lease; a data change, a read again ("").
func (l *lease) ownFirst(watches map[string]<-chan zk.Event, self, gone string) (string, error) {
	select {
	case ev := <-watches[self]:
		delete(watches, self)
		return "", l.ownEvent(ev)
	default:
		return gone, nil
	}
}

// ownEvent maps an event of the watch on our own node while waiting: its
// deletion (or the session's end) loses the lease; a data change does not.
func (l *lease) ownEvent(ev zk.Event) error {
	switch ev.Type {
	case zk.EventNodeDeleted:
		return l.markLostWhy("deleted while waiting")
	case zk.EventNotWatching:
		return l.markSessionLost("the session ended while waiting")
	}
	return nil
}

// retryLater reports whether a waiter should read again after err: the
// connection dropped but the session may live (go-zookeeper queues the next
// request until it reconnects). It pauses briefly first.
func (l *lease) retryLater(ctx context.Context, err error) bool {
	if !connDown(err) || l.g.ended() {
		return false
	}
	t := time.NewTimer(20 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-l.g.ctx.Done():
	}
	return false
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

// children lists the children of our lock directory (none if it does not
// exist).
func (l *lease) children(ctx context.Context) ([]string, error) {
	var kids []string
	sent := time.Now()
	l.d.childReads.Add(1)
	err := call(ctx, func() error {
		var err error
		kids, _, err = l.s.conn.Children(l.dir)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		err, kids = nil, nil
	}
	if err != nil {
		return nil, l.opError("get children of "+l.dir, err)
	}
	if !l.alive(sent) {
		return nil, l.markSessionLost("the session ended")
	}
	return kids, nil
}

// create creates our node in the background and waits for the outcome or
// ctx. The background part always records the outcome, so that Release can
// delete a node whose create outlived a cancelled Lock. Unless the create
// showed that our node is the directory's only child, it then reads the
// directory's children (the first check of the queue), on the same
// goroutine, so Lock hands over to a goroutine once per acquisition rather
// than once per request; kids is that check (nil if the read failed: Lock
// reads again).
func (l *lease) create(ctx context.Context, plain bool) (kids []string, err error) {
	done, read := make(chan struct{}), make(chan struct{})
	l.mu.Lock()
	l.st, l.createDone = stCreating, done
	l.mu.Unlock()
	var first []string
	go func() {
		defer close(read)
		path, czxid, alone, err := l.doCreate(plain)
		l.data = nil // written: a held lease need not keep it
		l.mu.Lock()
		if err == nil {
			l.path, l.czxid, l.version = path, czxid, 0
		}
		l.createErr = err
		l.mu.Unlock()
		close(done)
		if err != nil {
			return
		}
		if alone {
			first = []string{path[strings.LastIndexByte(path, '/')+1:]}
			return
		}
		sent := time.Now()
		l.d.childReads.Add(1)
		k, _, err := l.s.conn.Children(l.dir)
		if err == nil && l.alive(sent) {
			first = k
		}
	}()
	select {
	case <-read:
		l.mu.Lock()
		err := l.createErr
		l.mu.Unlock()
		return first, err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.g.ctx.Done():
		return nil, l.markLostWhy("")
	}
}

// doCreate creates our protected ephemeral sequential node. With plain
// (a lock contended at our last acquisition) it is a plain create, and
// czxid is 0: unknown yet (a waiter's watch on its own node brings it, see
// waitGone; Lock reads it if it did not wait after all). Otherwise it is
// one Multi: the create, and an unconditional empty setData on the lock
// directory in the same transaction. The transaction has one zxid, so the
// directory's new mzxid (returned by the setData) is our node's czxid: the
// token, without a read; and its child count, in the same Stat, tells
// whether our node is alone in it, in which case it holds the lock without
// a getChildren (alone is false when that is not known). Where we may not
// write the directory, the Multi is refused and a plain create follows. A
// missing directory is created (container nodes, top-down) and the create
// retried. If the connection drops with the create in flight, our node is
// looked up by its guid before anything else (protected mode), so there is
// never a second one.
func (l *lease) doCreate(plain bool) (path string, czxid int64, alone bool, err error) {
	conn := l.s.conn
	nodePrefix := l.dir + "/" + protectedPrefix + l.guid + "-" + lockMarker
	if l.delay > 0 {
		if err := l.createMarker(); err != nil {
			return "", 0, false, err
		}
	}
	var last error
	for attempt := 0; attempt < createAttempts; attempt++ {
		if l.g.ended() {
			return "", 0, false, l.markSessionLost("the session ended before the create")
		}
		sent := time.Now()
		var res []zk.MultiResponse
		if plain {
			path, err = conn.Create(nodePrefix, l.data, zk.FlagEphemeralSequential, l.d.acl)
		} else {
			res, err = conn.Multi(
				&zk.CreateRequest{Path: nodePrefix, Data: l.data, Acl: l.d.acl, Flags: zk.FlagEphemeralSequential},
				&zk.SetDataRequest{Path: l.dir, Data: nil, Version: -1},
			)
		}
		switch {
		case err == nil && plain:
			czxid, alone = 0, false
		case err == nil && len(res) == 2 && res[1].Stat != nil:
			path, czxid, alone = res[0].String, res[1].Stat.Mzxid, res[1].Stat.NumChildren == 1
		case err == nil:
			return "", 0, false, fmt.Errorf("zookeeper: unexpected multi reply %+v", res)
		case errors.Is(err, zk.ErrNoNode):
			if err := l.makeDir(); err != nil {
				return "", 0, false, err
			}
			last = err
			continue
		case !plain && errors.Is(err, zk.ErrNoAuth) && len(res) == 2 && res[1].Error != nil && errors.Is(res[1].Error, zk.ErrNoAuth):
			// No write permission on the directory (the transaction
			// created nothing): a plain create.
			plain, last = true, err
			continue
		case connDown(err):
			last = err
			path, czxid, found, ferr := l.findOwn()
			if ferr != nil {
				return "", 0, false, ferr
			}
			if found {
				return path, czxid, false, nil
			}
			continue
		case sessionGone(err):
			return "", 0, false, l.markSessionLost("the session ended during the create")
		default:
			return "", 0, false, l.opError("create lock node in "+l.dir, err)
		}
		if !l.alive(sent) {
			l.dropStray(path)
			return "", 0, false, l.lostError(backend.ErrSessionLost, "the session changed during the create")
		}
		return path, czxid, alone, nil
	}
	return "", 0, false, fmt.Errorf("zookeeper: create lock node under %s: gave up after %d attempts: %w", l.dir, createAttempts, last)
}

// dropStray marks the lease lost and deletes our node at path, created by
// a request that was answered in a session other than ours: go-zookeeper
// keeps a request that could not be sent and sends it once the Conn has a
// session again, a new one if ours expired meanwhile. The node would live
// as long as that session, holding the lock. The request is retried while
// the connection is down (a bounded number of times; if the new session
// expires too, so does the node).
func (l *lease) dropStray(path string) {
	_ = l.markSessionLost("the session changed during the create")
	for attempt := 0; attempt < createAttempts; attempt++ {
		if err := l.s.conn.Delete(path, -1); !connDown(err) {
			return
		}
	}
}

// recordUnread keeps path so that Release deletes it, and reports why the
// create cannot complete.
func (l *lease) recordUnread(path string, err error) error {
	l.mu.Lock()
	l.path = path
	l.mu.Unlock()
	if err == nil {
		err = errors.New("no czxid")
	}
	return fmt.Errorf("zookeeper: read czxid of %s: %w", path, err)
}

// findOwn looks for our node by its guid after a create whose reply was
// lost. The request blocks until the Conn reconnects; if it reconnected
// with a new session, our node (if any) died with the old one.
func (l *lease) findOwn() (path string, czxid int64, found bool, err error) {
	for attempt := 0; ; attempt++ {
		if l.g.ended() {
			return "", 0, false, l.markSessionLost("the session ended during the create")
		}
		sent := time.Now()
		kids, _, err := l.s.conn.Children(l.dir)
		if connDown(err) && attempt < createAttempts {
			continue
		}
		if errors.Is(err, zk.ErrNoNode) {
			return "", 0, false, nil
		}
		if err != nil {
			return "", 0, false, l.opError("find own node", err)
		}
		mark := protectedPrefix + l.guid + "-"
		if !l.alive(sent) {
			for _, k := range kids {
				if strings.HasPrefix(k, mark) {
					l.dropStray(l.dir + "/" + k)
				}
			}
			return "", 0, false, l.markSessionLost("the session changed during the create")
		}
		for _, k := range kids {
			if strings.HasPrefix(k, mark) {
				p := l.dir + "/" + k
				sent := time.Now()
				_, st, err := l.s.conn.Exists(p)
				if err != nil || !l.alive(sent) || st == nil || st.Czxid == 0 {
					return "", 0, false, l.recordUnread(p, err)
				}
				return p, st.Czxid, true, nil
			}
		}
		return "", 0, false, nil
	}
}

// makeDir creates the lock directory, and its missing ancestors, as
// container nodes (the server deletes a container once its last child is
// gone). It creates the directory first and goes up only while a parent is
// missing, so an existing prefix costs nothing more and is never created
// again: ZooKeeper checks CREATE on the parent before it looks for the
// node, so creating an existing node under a parent we may not write (an
// operator's /app above our /app/locks) would be refused.
func (l *lease) makeDir() error {
	return l.makeNode(l.dir)
}

func (l *lease) makeNode(p string) error {
	for attempt := 0; ; attempt++ {
		_, err := l.s.conn.CreateContainer(p, nil, zk.FlagContainer, l.d.acl)
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return nil
		case errors.Is(err, zk.ErrNoNode) && attempt < createAttempts:
			parent := path.Dir(p)
			if parent == "/" {
				return l.opError("create "+p, err)
			}
			if err := l.makeNode(parent); err != nil {
				return err
			}
			continue
		case errors.Is(err, zk.ErrNoAuth):
			// The parent's ACL does not let us create children; the
			// node may exist all the same (exists needs no permission).
			if ok, _, eerr := l.s.conn.Exists(p); eerr == nil && ok {
				return nil
			}
			return l.opError(fmt.Sprintf("create %s: the ACL of %s does not give this client CREATE (another identity created it?)", p, path.Dir(p)), err)
		default:
			return l.opError("create "+p, err)
		}
	}
}

// watchOwn hands armed, the data watch on our node that the wait set and
// that is still armed, to the session's dispatcher, which reports the loss
// when the node is deleted by anyone but our Release (ownWatchFired). No
// goroutine waits for it.
func (l *lease) watchOwn(armed <-chan zk.Event) {
	l.registerOwn(armed)
}

// registerOwn registers the watch on our node with the session (ch, its
// channel, if it is set already) and reports whether it did: not once
// Release has started.
func (l *lease) registerOwn(ch <-chan zk.Event) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.path == "" || l.releasedLocked() {
		return false
	}
	l.s.addOwn(l.path, l, ch)
	return true
}

// releasedLocked reports whether Release has started; l.mu must be held.
func (l *lease) releasedLocked() bool { return l.cleanup != nil }

// armOwnAfter sets a data watch on our node after delay (armOwn, on a
// timer's goroutine), unless released before; retry counts the attempts
// that found the connection down.
func (l *lease) armOwnAfter(delay time.Duration, retry int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.releasedLocked() {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		l.mu.Lock()
		if l.watchTimer == t {
			l.watchTimer = nil // fired: a held lease need not keep it
		}
		l.mu.Unlock()
		l.armOwn(retry)
	})
	l.watchTimer = t
}

// armOwn sets a data watch on our node and registers it with the session's
// dispatcher (before the request, so that no event of it arrives
// unregistered). A deletion found now is a loss; a connection that is
// down is tried again later (armOwnAfter, with a backoff), while the
// session lives; any other failure leaves the renewal to find a loss.
func (l *lease) armOwn(retry int) {
	if !l.registerOwn(nil) {
		return
	}
	l.mu.Lock()
	path := l.path
	l.mu.Unlock()
	_, _, ch, err := l.s.conn.GetW(path)
	switch {
	case err == nil:
		l.registerOwn(ch)
	case errors.Is(err, zk.ErrNoNode):
		l.ownGone("deleted")
	case sessionGone(err):
		l.ownGone("the session ended")
	case connDown(err) && !l.g.ended():
		l.armOwnAfter(min(ownWatchDelay<<retry, ownRewatchMax), min(retry+1, 8))
	}
}

// ownWatchFired handles an event of the data watch on our node: a deletion
// by anyone but our Release (whose own delete is not reported: Release
// unregisters first) or the session's end is a loss; a data change (someone
// wrote our node) fired the watch, which is set again. It runs on the
// Conn's receive goroutine or the session's poll loop, so it sends no
// request itself.
func (l *lease) ownWatchFired(ev zk.Event) {
	switch ev.Type {
	case zk.EventNodeDeleted:
		l.ownGone("deleted")
	case zk.EventNotWatching:
		l.mu.Lock()
		l.s.dropOwn(l.path, l)
		l.mu.Unlock()
		if l.g.ended() || sessionGone(ev.Err) {
			l.ownGone("the session ended")
		}
	case zk.EventNodeDataChanged:
		l.armOwnAfter(0, 0)
	}
}

// ownGone reports our node found gone, unless Release has started, and
// unregisters its watch.
func (l *lease) ownGone(why string) {
	l.mu.Lock()
	released := l.releasedLocked()
	if l.st == stWaiting {
		why += " while waiting"
	}
	l.s.dropOwn(l.path, l)
	l.mu.Unlock()
	if !released {
		_ = l.markLostWhy(why)
	}
}

// KeepAlive implements driver.Lease with one Exists of our node (of
// the lock directory before our node exists): it proves that the session is
// alive (the server renews a session on every request) and that our node is
// still there. While the connection is down it fails at once, and Locker
// retries until the deadline.
func (l *lease) KeepAlive(ctx context.Context) (time.Time, error) {
	l.mu.Lock()
	released := l.releasedLocked()
	l.mu.Unlock()
	if released {
		return time.Time{}, fmt.Errorf("%w: zookeeper: keepalive after release", backend.ErrReleased)
	}
	if l.s.ownerClosed() {
		return time.Time{}, errClientClosed
	}
	if l.g.ended() {
		return time.Time{}, l.markLostWhy("")
	}
	if st := l.s.conn.State(); st != zk.StateHasSession {
		return time.Time{}, fmt.Errorf("%w: zookeeper: connection suspended (%v)", backend.ErrUnavailable, st)
	}
	l.mu.Lock()
	path := l.path
	l.mu.Unlock()
	target := path
	if target == "" {
		target = l.d.prefix
	}
	var exists bool
	sent := time.Now()
	err := call(ctx, func() error {
		var err error
		exists, _, err = l.s.conn.Exists(target)
		return err
	})
	if err != nil {
		return time.Time{}, l.opError("keepalive", err)
	}
	if !l.alive(sent) {
		return time.Time{}, l.markSessionLost("the session ended")
	}
	if path != "" && !exists {
		return time.Time{}, l.markLostWhy("deleted")
	}
	return sent, nil
}

// Release implements driver.Lease: it deletes our node, with the data
// version it was created with (0) or that our last Proclaim left, in the
// background, and waits for that or ctx. The background part outlives a
// ctx that ends first: it waits for a create still in flight, and retries
// a delete that could not reach the server, until it succeeds or the
// session ends (which deletes the node anyway), so a cancelled acquisition
// never leaves an orphan node (go-zookeeper#229). Later calls wait for the
// same outcome.
func (l *lease) Release(ctx context.Context, lost bool) error {
	l.mu.Lock()
	if l.cleanup == nil {
		l.cleanup = make(chan struct{})
		l.relLost = lost
		if l.watchTimer != nil {
			l.watchTimer.Stop()
		}
		if l.path != "" {
			l.s.dropOwn(l.path, l)
		}
		go l.runCleanup()
	}
	done := l.cleanup
	l.mu.Unlock()
	select {
	case <-done:
	default:
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("zookeeper: release (continuing in the background): %w", ctx.Err())
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.closedErr(l.relErr)
}

func (l *lease) runCleanup() {
	err := l.cleanupNode()
	l.g.leave(l)
	l.mu.Lock()
	l.relErr = err
	close(l.cleanup)
	l.mu.Unlock()
}

func (l *lease) cleanupNode() error {
	l.mu.Lock()
	createDone := l.createDone
	l.mu.Unlock()
	if createDone != nil {
		select {
		case <-createDone:
		case <-l.d.closing:
			return nil // closing the session deletes it
		}
	}
	l.mu.Lock()
	path, version, st := l.path, l.version, l.st
	l.mu.Unlock()
	held := st == stHeld
	l.dropMarker(held) // before the lock node: see lockdelay.go
	if path == "" {
		return nil
	}
	gone := func() error {
		if held {
			return l.lostError(backend.ErrDeleted, "already gone at release")
		}
		return nil
	}
	backoff := 10 * time.Millisecond
	for {
		if l.g.ended() {
			return gone()
		}
		err := l.s.conn.Delete(path, version)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrNoNode):
			return gone()
		case errors.Is(err, zk.ErrBadVersion):
			// Someone wrote our node's data; the path (guid and
			// sequence) is still ours alone.
			exists, stat, err := l.s.conn.Exists(path)
			if err == nil && !exists {
				return gone()
			}
			if err == nil && stat != nil && stat.Version != version {
				version = stat.Version
				continue
			}
		case sessionGone(err), errors.Is(err, zk.ErrClosing):
			return gone()
		case connDown(err):
		default:
			return fmt.Errorf("zookeeper: delete %s: %w", path, mapErr(err))
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-l.d.closing:
			t.Stop()
			return nil
		}
		backoff = min(2*backoff, cleanupRetryMax)
	}
}

// proclaimAttempts bounds the setData requests of one Proclaim while our
// node's data version keeps changing under it (another client writing it).
const proclaimAttempts = 8

// Proclaim implements driver.Lease with one setData of our node, at the
// data version this lease last wrote or read (0 from the create): the node
// is the holder's (it was granted, and sequence numbers only grow, so
// while it exists it holds the lock) and its path, with its guid, is this
// acquisition's alone, so a node found gone is a lost lease and the
// request writes nothing (never another holder's node, nor one created
// again in a later session). A version conflict is another client's write
// to our node: its version is read (1 exists) and the write tried again.
// Our own write fires the data watch on our node, which is set again (see
// ownWatchFired): a data change is never a loss; the waiters watching our
// node set theirs again and wait on (see waitGone). While the connection
// is down it fails at once with backend.ErrUnavailable, as KeepAlive does;
// a request still unanswered when ctx ends is abandoned with an error
// matching backend.ErrUnavailable and ctx's error (it may still be
// applied: the caller asks again).
func (l *lease) Proclaim(ctx context.Context, value string) error {
	l.mu.Lock()
	path, version, st, released := l.path, l.version, l.st, l.releasedLocked()
	l.mu.Unlock()
	switch {
	case released:
		return fmt.Errorf("%w: zookeeper: proclaim after release", backend.ErrReleased)
	case st != stHeld || path == "":
		return errors.New("zookeeper: proclaim before the lock was granted")
	case l.g.ended():
		return l.markLostWhy("")
	}
	if cs := l.s.conn.State(); cs != zk.StateHasSession {
		return fmt.Errorf("%w: zookeeper: proclaim: connection suspended (%v)", backend.ErrUnavailable, cs)
	}
	data := valueData(value)
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		err := call(ctx, func() error {
			stat, err := l.s.conn.Set(path, data, version)
			if err == nil {
				l.noteVersion(stat.Version) // even if the caller stopped waiting
			}
			return err
		})
		switch {
		case err == nil:
			if !l.alive(sent) {
				return l.markSessionLost("the session ended")
			}
			return nil
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			return fmt.Errorf("%w: zookeeper: proclaim: no answer before the context ended (the value may still be stored): %w", backend.ErrUnavailable, err)
		case errors.Is(err, zk.ErrNoNode):
			return l.markLostWhy("deleted")
		case !errors.Is(err, zk.ErrBadVersion) || attempt == proclaimAttempts:
			return l.opError("proclaim", err)
		}
		var ok bool
		var cur *zk.Stat
		sent = time.Now()
		err = call(ctx, func() (err error) { ok, cur, err = l.s.conn.Exists(path); return err })
		switch {
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			return fmt.Errorf("%w: zookeeper: proclaim: no answer before the context ended: %w", backend.ErrUnavailable, err)
		case err != nil:
			return l.opError("proclaim: read version", err)
		case !l.alive(sent):
			return l.markSessionLost("the session ended")
		case !ok:
			return l.markLostWhy("deleted")
		}
		version = cur.Version
	}
}

// noteVersion records v, the data version a write of ours left on our
// node, for the next Proclaim and for Release's delete. Versions only
// grow, so an older answer arriving late changes nothing.
func (l *lease) noteVersion(v int32) {
	l.mu.Lock()
	if v > l.version {
		l.version = v
	}
	l.mu.Unlock()
}
