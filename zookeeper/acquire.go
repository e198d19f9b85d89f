package zookeeper

// Lock: our node created, its turn waited for, and its czxid, the fencing
// token.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

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
	if err != nil && ctx.Err() != nil {
		// Queued: our node was created, behind another, before ctx ended;
		// the connection may be down now.
		l.mu.Lock()
		w := driver.Wait{Where: "zookeeper: queued in " + l.dir, Queued: l.st == stWaiting}
		l.mu.Unlock()
		if suspended, _ := l.s.suspension(); suspended {
			w.Stopped = "disconnected"
		}
		return driver.Grant{}, driver.WaitError(ctx, err, w)
	}
	return driver.Grant{Token: token, Sent: sent}, err
}

func (l *lease) lock(ctx context.Context, wait bool) (fencing.Token, time.Time, error) {
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
