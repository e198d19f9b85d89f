package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

// lockNode is one lock node of a name, as Inspect and Revoke read it.
type lockNode struct {
	path string
	seq  int64
	data []byte
	stat *zk.Stat
}

// lockNodes lists name's lock nodes in queue order (sequence suffix), each
// with its data and Stat: sync, getChildren plus one getData per node.
// Nodes that vanish meanwhile and children that are not lock nodes are
// left out.
//
// The sync comes first because the session that reads is not always the
// one that wrote: a Locker keeps a session per TTL, so a grant made on one
// session may not yet be on the follower another session reads from (on
// an ensemble, seen in CI: a leader's own Elector.Leader said "no leader"
// right after its Campaign returned). sync brings the server this session
// reads from up to date with the ensemble's leader, so Status shows every
// grant made before it was called.
func (d *zkDriver) lockNodes(ctx context.Context, name string) ([]lockNode, error) {
	s, err := d.session(ctx, d.defaultTTL)
	if err != nil {
		return nil, err
	}
	dir := lockDir(d.prefix, name)
	err = call(ctx, func() error { _, err := s.conn.Sync(dir); return err })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("zookeeper: sync %s: %w", dir, mapErr(err))
	}
	var children []string
	err = call(ctx, func() (err error) { children, _, err = s.conn.Children(dir); return err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("zookeeper: list %s: %w", dir, mapErr(err))
	}
	var nodes []lockNode
	for _, c := range children {
		seq, ok := lockSeq(c)
		if !ok {
			continue
		}
		n := lockNode{path: dir + "/" + c, seq: seq}
		err := call(ctx, func() (err error) { n.data, n.stat, err = s.conn.Get(n.path); return err })
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("zookeeper: read %s: %w", n.path, mapErr(err))
		}
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].seq < nodes[j].seq })
	return nodes, nil
}

// Inspect implements driver.Driver: the holder first, then the waiters
// in queue order, each with its node's name as its ID, its czxid as the
// token and its node's data, as it is, as its Value: a candidate's value
// (WithValue), a lock acquisition's JSON record of holder and metadata, a
// Curator LeaderSelector participant's id, whatever another client wrote.
// Holder and Metadata are read from the data where it is such a JSON
// record (nodes of zk.Lock or Curator holders show unnamed, and so do
// candidates, unless a value is itself such a record). A ZooKeeper lease
// is its session, whose remaining time the server does not tell, so
// TTLLeft is unknown (negative).
func (d *zkDriver) Inspect(ctx context.Context, name string) (driver.Status, error) {
	nodes, err := d.lockNodes(ctx, name)
	if err != nil {
		return driver.Status{}, d.closedErr(err)
	}
	var entries []driver.Entry
	for _, n := range nodes {
		e := driver.Entry{ID: path.Base(n.path), Token: fencing.Token(n.stat.Czxid), TTLLeft: -1, Value: string(n.data)}
		var v nodeValue
		if json.Unmarshal(n.data, &v) == nil {
			e.Holder, e.Metadata = v.Holder, v.Metadata
		}
		entries = append(entries, e)
	}
	return driver.Queued(entries), nil
}

// Revoke implements driver.Driver: it deletes the lock node whose czxid is
// token, as a session expiry would; its holder's node watch reports the
// loss. The delete is not version-checked: the node's path, with its
// sequence number (and guid), is that acquisition's alone, as for RevokeID,
// and its data version changes while it holds (a candidate's Proclaim),
// which would make a checked delete fail for a write that revokes nothing.
func (d *zkDriver) Revoke(ctx context.Context, name string, token fencing.Token) (bool, error) {
	nodes, err := d.lockNodes(ctx, name)
	if err != nil {
		return false, d.closedErr(err)
	}
	s, err := d.session(ctx, d.defaultTTL)
	if err != nil {
		return false, err
	}
	for _, n := range nodes {
		if n.stat.Czxid != int64(token) {
			continue
		}
		err := call(ctx, func() error { return s.conn.Delete(n.path, -1) })
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return false, nil
		case err != nil:
			return false, d.closedErr(fmt.Errorf("zookeeper: delete %s: %w", n.path, mapErr(err)))
		}
		return true, nil
	}
	return false, nil
}

// RevokeID implements driver.Driver: it deletes the lock node named id
// (any version: its sequence number makes the name the acquisition's alone),
// as a session expiry would. The holder's node watch reports the loss, a
// waiter's watch on its own node ends its wait with ErrLeaseLost, and the
// next waiter's watch on its predecessor grants it the lock. An id with a
// '/' or that is not a lock node's name is refused.
func (d *zkDriver) RevokeID(ctx context.Context, name, id string) (bool, error) {
	if _, ok := lockSeq(id); !ok || strings.Contains(id, "/") {
		return false, fmt.Errorf("%w: zookeeper: %q is not the name of a lock node", backend.ErrInvalidOption, id)
	}
	s, err := d.session(ctx, d.defaultTTL)
	if err != nil {
		return false, err
	}
	node := lockDir(d.prefix, name) + "/" + id
	err = call(ctx, func() error { return s.conn.Delete(node, -1) })
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return false, nil
	case err != nil:
		return false, d.closedErr(fmt.Errorf("zookeeper: delete %s: %w", node, mapErr(err)))
	}
	return true, nil
}
