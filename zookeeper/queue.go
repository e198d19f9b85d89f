package zookeeper

// The wait in the queue: the watches on the nodes ahead of ours, and on our
// own, until ours is the first lock node of the directory.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
)

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
