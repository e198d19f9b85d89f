package zookeeper

import (
	"context"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
)

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
