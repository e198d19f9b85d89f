package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
)

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
