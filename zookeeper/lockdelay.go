package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
)

// The lock-delay (driver.Request.LockDelay) of a ZooKeeper acquisition is
// a persistent marker node in the lock's directory, "delay-<guid>" (guid:
// the acquisition's, as in its lock node's name; not a lock node, so the
// queue ignores it), whose data is the delay in ms. It is created before
// the acquisition's lock node, so every acquisition queued behind it has
// it in the children it reads; once the lock is granted, before the grant
// is returned, its data becomes "held:" and the delay (version 1): only a
// marker of an acquisition that held the lock delays anyone, so that one
// whose lock node is not created yet (the marker comes first) or that
// ended while waiting is not taken for a crashed holder's. Its own release deletes it before its lock
// node; the release of a holder after a loss leaves it. Its lock node
// being ephemeral, the marker outlives a crashed holder's session, and the
// next acquisition granted the lock deals with every marker whose lock node
// is gone:
//
//   - a waiter waits the longest such delay, counted from when it was
//     granted (it then holds the lock), deletes them, and only then returns
//     its grant;
//   - a TryAcquire fails with ErrNotAcquired and marks each one ended
//     (setData, version 2: its mtime is then when the end was first
//     seen); one that
//     finds them all marked ended more than their delay ago (by the
//     server's mtime and this client's clock) deletes them and takes the
//     lock.
//
// An acquisition that saw no marker in the children it read (none of an
// acquisition ahead of it) makes no request for this: the delay costs
// only where it is used. A marker blocks the lock for at most its delay
// after its end was seen; one left by a crash stays (one node) until the
// name is acquired again.

// markerPrefix starts a marker node's name; the acquisition's guid follows.
const markerPrefix = "delay-"

// orphanMarkerAge is how old a marker never marked held, whose lock node
// is gone, must be to be deleted by whoever is granted the lock: an
// acquisition makes its lock node right after its marker (a few round
// trips, or its session ends), so one that old is a crashed or given-up
// waiter's. (Deleting one too young costs only its acquisition an error
// when it marks it held; the server's ctime against this client's clock.)
const orphanMarkerAge = 5 * time.Minute

// heldPrefix starts the data of the marker of an acquisition that was
// granted the lock; the delay in ms follows.
const heldPrefix = "held:"

// guidOf returns the guid of a lock node's name ("_c_<guid>-lock-<seq>"),
// or "".
func guidOf(node string) string {
	rest, ok := strings.CutPrefix(node, protectedPrefix)
	if !ok {
		return ""
	}
	guid, _, _ := strings.Cut(rest, "-")
	return guid
}

// notePeers records whether kids, children of l's directory, hold a marker
// of another acquisition: its grant must then look for markers left
// behind (afterGrant).
func (l *lease) notePeers(kids []string) {
	for _, k := range kids {
		if strings.HasPrefix(k, markerPrefix) && k != markerPrefix+l.guid {
			l.sawMarker = true
			return
		}
	}
}

// createMarker creates l's marker, before its lock node (an earlier
// attempt's is fine).
func (l *lease) createMarker() error {
	data := []byte(strconv.FormatInt((l.delay + time.Millisecond - 1).Milliseconds(), 10))
	for attempt := 0; ; attempt++ {
		_, err := l.s.conn.Create(l.dir+"/"+markerPrefix+l.guid, data, 0, l.d.acl)
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return nil
		case errors.Is(err, zk.ErrNoNode) && attempt < createAttempts:
			if err := l.makeDir(); err != nil {
				return err
			}
		default:
			return l.opError("create the lock-delay marker in "+l.dir, err)
		}
	}
}

// afterGrant runs when the lock was granted to l, before the grant is
// returned: if l saw another acquisition's marker, it deals with those
// whose lock node is gone, as the comment above says.
func (l *lease) afterGrant(ctx context.Context, wait bool) error {
	if err := l.markHeld(ctx); err != nil {
		return err
	}
	if !l.sawMarker {
		return nil
	}
	for {
		kids, err := l.children(ctx)
		if err != nil {
			return err
		}
		live := make(map[string]bool)
		for _, k := range kids {
			if _, ok := lockSeq(k); ok {
				live[guidOf(k)] = true
			}
		}
		var left []string
		for _, k := range kids {
			if g, ok := strings.CutPrefix(k, markerPrefix); ok && g != l.guid && !live[g] {
				left = append(left, l.dir+"/"+k)
			}
		}
		if len(left) == 0 {
			return nil
		}
		var (
			longest time.Duration
			ended   []string // the markers of holders whose node is gone
		)
		blocked := false
		for _, m := range left {
			var (
				data []byte
				st   *zk.Stat
			)
			err := call(ctx, func() error {
				var err error
				data, st, err = l.s.conn.Get(m)
				return err
			})
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return l.opError("read the lock-delay marker "+m, err)
			}
			ms, held := strings.CutPrefix(string(data), heldPrefix)
			if !held {
				// Not granted (yet): no holder of the lock ended. One
				// this old belongs to an acquisition that ended while it
				// waited, or before it made its lock node: nobody's.
				if time.Since(time.UnixMilli(st.Ctime)) > orphanMarkerAge {
					_ = call(ctx, func() error { return l.s.conn.Delete(m, st.Version) })
				}
				continue
			}
			ended = append(ended, m)
			n, _ := strconv.ParseInt(ms, 10, 64)
			delay := time.Duration(n) * time.Millisecond
			longest = max(longest, delay)
			switch {
			case wait:
			case st.Version == 1:
				// The first to see its acquisition gone: its mtime says when.
				_ = call(ctx, func() error {
					_, err := l.s.conn.Set(m, data, 1)
					return err
				})
				blocked = true
			case time.Since(time.UnixMilli(st.Mtime)) < delay:
				blocked = true
			}
		}
		if len(ended) == 0 {
			return nil
		}
		if blocked {
			return fmt.Errorf("%w: zookeeper: %s is in the lock-delay of a holder whose node is gone", backend.ErrNotAcquired, l.dir)
		}
		if wait {
			t := time.NewTimer(longest)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%w: zookeeper: in the lock-delay of a holder whose node is gone: %w", backend.ErrNotAcquired, ctx.Err())
			}
		}
		for _, m := range ended {
			err := call(ctx, func() error { return l.s.conn.Delete(m, -1) })
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				return l.opError("delete the lock-delay marker "+m, err)
			}
		}
	}
}

// markHeld marks l's marker, if it has one, as a holder's, before its
// grant is returned (see above).
func (l *lease) markHeld(ctx context.Context) error {
	if l.delay <= 0 {
		return nil
	}
	data := []byte(heldPrefix + strconv.FormatInt((l.delay+time.Millisecond-1).Milliseconds(), 10))
	err := call(ctx, func() error {
		_, err := l.s.conn.Set(l.dir+"/"+markerPrefix+l.guid, data, -1)
		return err
	})
	if err != nil {
		return l.opError("mark the lock-delay marker held", err)
	}
	return nil
}

// dropMarker deletes l's marker at its release, unless the release follows
// the loss of a held lock (the lock-delay then stays in force). A failure
// is left to the next acquisition granted the lock.
func (l *lease) dropMarker(held bool) {
	l.mu.Lock()
	lost := l.relLost
	l.mu.Unlock()
	if l.delay > 0 && !(held && lost) {
		_ = l.s.conn.Delete(l.dir+"/"+markerPrefix+l.guid, -1)
	}
}
