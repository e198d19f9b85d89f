package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
)

// cleanupRetryMax caps the backoff of a release that cannot reach the
// server.
const cleanupRetryMax = time.Second

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
