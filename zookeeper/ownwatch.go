package zookeeper

// The data watch on our node once the lock is granted: the session's
// dispatcher reports its deletion by anyone but our Release, or the
// session's end, as the loss of the lease.

import (
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
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

// watchOwnSoon arranges for our node to be watched once it has existed for
// ownWatchDelay (unless released before).
func (l *lease) watchOwnSoon() {
	l.armOwnAfter(ownWatchDelay, 0)
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
