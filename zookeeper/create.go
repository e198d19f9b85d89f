package zookeeper

// Creating our node, and the lock directory it goes in: exactly one node,
// even when a reply is lost or the Conn runs a new session.

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
)

// createAttempts bounds the create retries (missing parents, a lost reply).
const createAttempts = 8

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
