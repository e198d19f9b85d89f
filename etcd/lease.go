package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

// state is where an acquisition stands in etcd.
type state int

const (
	stIdle     state = iota // no key written
	stUnknown               // a put was sent; whether it applied is unknown
	stWaiting               // our key is written and queued behind older keys
	stHeld                  // our key is written and was granted
	stReleased              // Release finished
)

// waitRetryMax caps the backoff between attempts to re-establish a failed
// watch or re-check while waiting.
const waitRetryMax = time.Second

// lease implements driver.Lease: one acquisition, holding one etcd
// lease of its own.
type lease struct {
	d   *etcdDriver
	ttl int64  // seconds
	dir string // <prefix>/<escaped name>/

	// regrantMu serializes replacing a pooled lease found gone before any
	// key was written (Lock and KeepAlive may both find it).
	regrantMu sync.Mutex

	mu       sync.Mutex
	id       clientv3.LeaseID
	sent     time.Time // send time of the last grant or keepalive of id
	fromPool bool      // id came from the pool and is not yet confirmed alive
	st       state
	key      string
	rev      int64 // create revision of key: the token
	doubtful bool  // id must not go back to the pool
	// value is a value this acquisition wrote to its key and knows to be
	// stored: the first put's, then each successful Proclaim's, or one of
	// proclaimed that ownKV saw stored.
	value string
	// proclaimed lists the values of the Proclaim puts (successful, or
	// whose outcome is unknown) that no event or read of the key has shown
	// yet, oldest first: see ownKV.
	proclaimed []string

	lost func(cause error) // the Request's Lost

	// keyLease, if not zero, is the lease the acquisition's key is put
	// with instead of id: that of an acquisition with a lock-delay (see
	// lockdelay.go). Fixed by NewLease.
	keyLease clientv3.LeaseID

	// The watch of our own key (see watchOwnKey).
	ownTimer   *time.Timer        // starts the watch, or checks the key after a failure
	own        *keyWatch          // registered on the hub; nil if not
	ownFrom    int64              // the revision the next watch starts from
	ownBackoff time.Duration      // pause before the next check
	ownCheck   context.CancelFunc // cancels the check in flight
	ownStopped bool               // released: no watch may start
}

// Suspended implements driver.Lease: the etcd client does not tell.
func (l *lease) Suspended() (bool, <-chan struct{}) { return false, nil }

func (l *lease) current() (clientv3.LeaseID, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id, l.fromPool
}

// Lock implements driver.Lease.
func (l *lease) Lock(ctx context.Context, wait bool) (driver.Grant, error) {
	var restarted time.Time
	for attempt := 0; ; attempt++ {
		id, fromPool := l.current()
		key := leaseKey(l.dir, id)
		l.mu.Lock()
		l.st, l.key = stUnknown, key
		value := l.value
		l.mu.Unlock()

		var resp *clientv3.TxnResponse
		var err error
		put := clientv3.OpPut(key, value, clientv3.WithLease(l.keyLeaseOf(id)))
		if wait {
			resp, err = l.d.client.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(put, clientv3.OpGet(l.dir, clientv3.WithPrefix(), clientv3.WithCountOnly())).
				Else(clientv3.OpGet(key)).
				Commit()
		} else {
			resp, err = l.d.client.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(l.dir), "=", 0).WithPrefix()).
				Then(put).
				Else(clientv3.OpGet(l.dir, clientv3.WithFirstCreate()...)).
				Commit()
		}
		if err != nil {
			if isLeaseNotFound(err) {
				// The put was refused: nothing was written.
				l.mu.Lock()
				l.st = stIdle
				l.mu.Unlock()
				if fromPool && attempt < 2 {
					// An idle lease revoked or expired under us: take a
					// fresh one and try again.
					sent, rerr := l.regrant(ctx, id)
					if rerr != nil {
						return driver.Grant{}, rerr
					}
					if !sent.IsZero() {
						restarted = sent
					}
					continue
				}
				l.setDoubtful()
				return driver.Grant{}, fmt.Errorf("%w: etcd lease %x not found", backend.ErrRevoked, int64(id))
			}
			return driver.Grant{}, fmt.Errorf("etcd: lock txn: %w", l.d.mapErr(err))
		}
		return l.locked(ctx, wait, key, resp, restarted)
	}
}

// locked continues Lock after its Txn.
func (l *lease) locked(ctx context.Context, wait bool, key string, resp *clientv3.TxnResponse, restarted time.Time) (driver.Grant, error) {
	if !resp.Succeeded {
		l.mu.Lock()
		l.st = stIdle
		if wait {
			// Our key exists although our lease is ours alone: something
			// else wrote it. Do not adopt it; Release revokes the lease,
			// which deletes it.
			l.doubtful = true
		}
		l.mu.Unlock()
		if wait {
			var created int64
			if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
				created = kvs[0].CreateRevision
			}
			return driver.Grant{}, fmt.Errorf("etcd: lock key %q already exists (created at revision %d) though its lease is this acquisition's alone; not adopting it", key, created)
		}
		msg := "held"
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if h := holderOf(kvs[0].Value); h != "" {
				msg = fmt.Sprintf("held by %s", h)
			}
			msg += fmt.Sprintf(" (token %d)", kvs[0].CreateRevision)
		}
		return driver.Grant{}, fmt.Errorf("%w: etcd: %s", backend.ErrNotAcquired, msg)
	}

	rev := resp.Header.Revision
	l.mu.Lock()
	l.rev, l.fromPool = rev, false
	if wait {
		l.st = stWaiting
	} else {
		l.st = stHeld
	}
	l.mu.Unlock()
	l.watchOwnKey(key, rev)
	if !wait {
		return driver.Grant{Token: fencing.Token(rev), Sent: restarted}, nil
	}

	if resp.Responses[1].GetResponseRange().GetCount() > 1 {
		// Queued: find the key just before ours with a serializable read
		// at our revision, outside the Txn, whose apply every write waits
		// for: only a read sorted by create revision finds it, and that
		// reads every key of the name (a count reads only the index).
		if err := l.waitTurn(ctx, key, rev); err != nil {
			// Our key was queued behind an older one; the client may have
			// lost its connection since.
			w := driver.Wait{Where: "etcd: queued", Queued: true}
			if ctx.Err() != nil && l.d.disconnected() {
				w.Stopped = "disconnected"
			}
			return driver.Grant{}, driver.WaitError(ctx, err, w)
		}
	}
	l.mu.Lock()
	l.st = stHeld
	l.mu.Unlock()
	return driver.Grant{Token: fencing.Token(rev), Sent: restarted}, nil
}

// regrant replaces stale, an idle lease found gone before any key was
// written with it, by a new lease. sent is the new grant's send time, or
// zero if another caller already replaced it.
func (l *lease) regrant(ctx context.Context, stale clientv3.LeaseID) (time.Time, error) {
	l.regrantMu.Lock()
	defer l.regrantMu.Unlock()
	if id, _ := l.current(); id != stale {
		return time.Time{}, nil
	}
	id, sent, err := l.d.grant(ctx, l.ttl)
	if err != nil {
		return time.Time{}, err
	}
	l.mu.Lock()
	l.id, l.sent, l.fromPool = id, sent, false
	l.mu.Unlock()
	return sent, nil
}

func (l *lease) setDoubtful() {
	l.mu.Lock()
	l.doubtful = true
	l.mu.Unlock()
}

// waitTurn waits until no key older than ours (create revision below rev)
// is left under the name. It finds the immediate predecessor with a read at
// rev, then watches that key (and ours, when next in line: see
// watchPredecessor), with no start revision so that the watcher is synced
// at once (etcd serves watchers that start in the past from a resync loop
// that runs every 100 ms), and re-reads the predecessor once the watch is
// confirmed and after every delete but that of a predecessor that was the
// only older key.
func (l *lease) waitTurn(ctx context.Context, key string, rev int64) error {
	backoff := 10 * time.Millisecond
	var (
		pred    string // "" until found
		predRev int64
		first   bool // pred was the only older key when found
	)
	for {
		var next *mvccpb.KeyValue
		var only bool
		var err error
		if pred == "" {
			next, only, err = l.predecessorAt(ctx, key, rev, rev)
		} else {
			next, only, err = l.watchPredecessor(ctx, key, rev, pred, predRev, first)
		}
		switch {
		case err == nil && next == nil:
			return nil
		case err == nil:
			pred, predRev, first = string(next.Key), next.CreateRevision, only
			backoff = 10 * time.Millisecond
			continue
		case errors.Is(err, backend.ErrLeaseLost):
			return err
		case errors.Is(l.d.mapErr(err), backend.ErrPermission):
			// Refused (a role revoked under us): retrying cannot help,
			// and giving up at ctx's end would look like a held lock.
			return l.d.mapErr(err)
		case ctx.Err() != nil:
			return ctx.Err()
		case l.d.client.Ctx().Err() != nil:
			return fmt.Errorf("etcd: wait: client closed: %w", err)
		}
		// A failed watch or read: try again after a pause; the lease is
		// renewed meanwhile, and its loss ends the wait.
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done(): // also when the lease is lost
			t.Stop()
			return ctx.Err()
		}
		backoff = min(2*backoff, waitRetryMax)
	}
}

// watchPredecessor watches pred until it is deleted, and finds out which key
// is the newest older than ours. It returns nil when none is left (our
// turn), the new predecessor if it changed (and whether it is the only
// older key), or an error.
//
// The reads it makes are serializable reads at the revision of the watch
// response just received (the created notice, or pred's deletion): the state
// at that revision and the events after it together miss nothing, and such a
// read is served by the member at once, where a linearizable read would
// first confirm the read index through raft, behind the WAL fsync of
// whatever concurrent write is in flight. If the member cannot serve that
// revision, it falls back to a linearizable read.
//
// If pred was the only key older than ours when found (first: it holds the
// lock), one watch covers pred and our own key (and whatever keys of the
// name lie between the two, whose deletions it ignores), so that their
// deletions arrive in the order of their revisions. While the last read
// shows pred as the only older key, pred's deletion at revision D is our
// turn without another read: no key created after ours can be older, and
// our key was there at the read and, no deletion of it having come before
// pred's, still at D. (A watch of pred alone would not tell: our key could
// have been deleted before D and its own watch not have said so yet.) A
// waiter further back watches pred alone, and reads on its deletion even if
// pred became the holder meanwhile (nothing tells it): a watch of the keys
// between two waiters' would bring each of them the deletions of a third
// of the queue. The turn is read, too, once the hub has had to create the
// watch again (see resumed).
func (l *lease) watchPredecessor(ctx context.Context, key string, rev int64, pred string, predRev int64, first bool) (*mvccpb.KeyValue, bool, error) {
	box := &watchMailbox{ready: make(chan struct{}, 1)}
	w := &keyWatch{key: pred, noPut: true, owner: box}
	if first {
		lo, hi := min(pred, key), max(pred, key)
		w.key, w.end = lo, hi+"\x00"
	}
	if !l.d.hub.add(w) {
		return nil, false, fmt.Errorf("etcd: wait: %w", backend.ErrClosed)
	}
	defer l.d.hub.remove(w)
	var (
		read int64 // the revision read last
		// last: pred was the only key older than ours at read, our key is
		// watched, and the watch has not been resumed.
		last bool
		// resumed: the hub created the watch again on a new stream, from
		// the revision after the last event it delivered. Such a watch
		// has a start revision, and etcd versions with
		// etcd-io/etcd#18089 may drop a deletion at the compaction
		// revision from it: from then on every turn is read.
		created, resumed bool
	)
	for {
		// Wait for the created notice, then for pred's or our key's
		// deletion.
		var at int64
		for at <= read {
			select {
			case <-ctx.Done(): // also when the lease is lost
				return nil, false, ctx.Err()
			case <-l.d.client.Ctx().Done():
				return nil, false, fmt.Errorf("etcd: wait: watch %q: %w", pred, errClientClosed)
			case <-box.ready:
			}
			turn, ownDeleted := false, false
			for _, wr := range box.take() {
				if wr.Canceled {
					return nil, false, fmt.Errorf("etcd: wait: watch %q: %w", pred, watchCancelError(wr))
				}
				if wr.Created {
					resumed = resumed || created
					created = true
					at = max(at, wr.Header.Revision)
				}
				for _, ev := range wr.Events {
					if ev.Type != mvccpb.DELETE {
						continue
					}
					// The state read at a revision at or after this
					// one reflects it. A deletion at or before the
					// revision read last (of an older copy of a key
					// name, from a resumed watch, or from a watch
					// whose creation etcd answered with a later
					// revision) is in that read: only a later one can
					// be the turn.
					switch string(ev.Kv.Key) {
					case pred:
						l.d.wakeups.Add(1)
						turn = turn || last && !resumed && ev.Kv.ModRevision > read
					case key:
						ownDeleted = true
					default:
						continue // another waiter's key between the two
					}
					at = max(at, ev.Kv.ModRevision, wr.Header.Revision)
				}
			}
			if turn && !ownDeleted {
				return nil, false, nil
			}
		}
		read = at
		next, only, err := l.predecessorAt(ctx, key, rev, at)
		if err != nil || next == nil {
			return nil, false, err
		}
		if string(next.Key) != pred || next.CreateRevision != predRev {
			return next, only, nil
		}
		last = only && first
	}
}

// predecessorAt returns the newest key under the name created before ours
// as of revision at, or nil if there is none, with one serializable read,
// and whether it is the only one; an error matching backend.ErrLeaseLost if
// our key was gone by then. If the member cannot serve revision at (it lags
// behind, or at was compacted) it asks predecessor instead, and does not
// tell whether the key is the only one (only is false).
func (l *lease) predecessorAt(ctx context.Context, key string, rev, at int64) (next *mvccpb.KeyValue, only bool, err error) {
	defer func() {
		if err == nil {
			l.d.reads.Add(1)
		}
	}()
	if at < rev {
		// The watch was served by a member that had not yet applied our
		// key: read the current state instead.
		next, err := l.predecessor(ctx, key, rev)
		return next, false, err
	}
	resp, err := l.d.client.Get(ctx, l.dir, clientv3.WithPrefix(), clientv3.WithRev(at), clientv3.WithSerializable(),
		clientv3.WithMaxCreateRev(rev), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(3))
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		next, err := l.predecessor(ctx, key, rev)
		return next, false, err
	}
	kvs := resp.Kvs
	if len(kvs) == 0 || string(kvs[0].Key) != key || kvs[0].CreateRevision != rev {
		err := l.keyGone(ctx, key, "")
		l.lost(err)
		return nil, false, err
	}
	if len(kvs) == 1 {
		return nil, false, nil
	}
	return kvs[1], len(kvs) == 2, nil
}

// predecessor returns the newest key under the name created before ours, or
// nil if there is none, in one linearizable read-only Txn that also checks
// that our key is still ours.
func (l *lease) predecessor(ctx context.Context, key string, rev int64) (*mvccpb.KeyValue, error) {
	resp, err := l.d.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpGet(l.dir, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(rev-1),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1))).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("etcd: wait: read predecessor: %w", l.d.mapErr(err))
	}
	if !resp.Succeeded {
		err := l.keyGone(ctx, key, "")
		l.lost(err)
		return nil, err
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		return kvs[0], nil
	}
	return nil, nil
}

// leaseGone is the loss of a lease etcd no longer has. etcd answers alike
// for an expired and a revoked lease, but a lease renewed in time cannot
// expire before its local deadline, which ends it first (ErrDeadline, or
// ErrExpired without renewals): the lease was revoked.
func leaseGone(id clientv3.LeaseID) error {
	return fmt.Errorf("%w: etcd lease %x not found", backend.ErrRevoked, int64(id))
}

// keyGoneTimeout bounds the read of keyGone.
const keyGoneTimeout = time.Second

// keyGone is the loss of our lock key, found gone (what says how: a
// deletion event, or "" for a read): backend.ErrRevoked if our lease is
// gone too (revoking a lease deletes its keys), else backend.ErrDeleted
// (someone deleted the key). It asks etcd for the lease's TTL, for
// keyGoneTimeout at most under ctx; without an answer the key is taken as
// deleted.
func (l *lease) keyGone(ctx context.Context, key, how string) error {
	l.mu.Lock()
	id := l.keyLeaseOf(l.id) // the lease the key was put with
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, keyGoneTimeout)
	defer cancel()
	if how == "" {
		how = "is gone"
	}
	if ttl, err := l.d.client.TimeToLive(ctx, id); err == nil && ttl.TTL == -1 || isLeaseNotFound(err) {
		return fmt.Errorf("%w: etcd lease %x not found, and lock key %q %s", backend.ErrRevoked, int64(id), key, how)
	}
	return fmt.Errorf("%w: etcd: lock key %q %s (its lease lives on)", backend.ErrDeleted, key, how)
}

// reportOwnKeyEvent reports the loss for an event on our own lock key: a
// delete (the lease revoked, or the key removed: keyGone tells which) or
// another client's put. It runs on a goroutine of its own: keyGone asks
// etcd, and the hub's goroutine, which delivered the event, must not wait.
func (l *lease) reportOwnKeyEvent(key string, ev *clientv3.Event) {
	if ev.Type != mvccpb.DELETE {
		l.lost(fmt.Errorf("%w: etcd: lock key %q was overwritten by another client at revision %d", backend.ErrDeleted, key, ev.Kv.ModRevision))
		return
	}
	if !l.d.track() {
		// The driver is closing: no read.
		l.lost(fmt.Errorf("%w: etcd: lock key %q was deleted at revision %d", backend.ErrDeleted, key, ev.Kv.ModRevision))
		return
	}
	go func() {
		defer l.d.bg.Done()
		l.lost(l.keyGone(l.d.hub.ctx, key, fmt.Sprintf("was deleted at revision %d", ev.Kv.ModRevision)))
	}()
}

// ownWatchDelay is how long a key must have existed before watchOwnKey
// watches it. Most uncontended holds are over sooner, and a watch created
// and cancelled for each of them costs the server and the client more than
// the rest of the acquisition; a revocation is still noticed within this
// delay (and by the next renewal in any case), and the watch starts from the
// key's creation, so it misses nothing.
const ownWatchDelay = 50 * time.Millisecond

// watchOwnKey watches our key, from the revision after its creation, once
// it has existed for ownWatchDelay, and reports the loss when it is deleted
// or written by anyone else: a put by another client (etcdctl put, a
// misconfigured tool with the same role) detaches the key from our lease,
// so it would outlive us, and replaces our value, so status tools would
// show a holder that is not. The only puts this acquisition makes after
// the first are its Proclaims', which ownKV tells from anyone else's. The
// watch is one of the driver's hub (no goroutine of its own), and no
// operation waits for it.
func (l *lease) watchOwnKey(key string, rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ownFrom, l.ownBackoff = rev+1, 0
	l.ownTimer = time.AfterFunc(ownWatchDelay, l.startOwnWatch)
}

// startOwnWatch registers the watch of our key on the hub, from ownFrom.
func (l *lease) startOwnWatch() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ownStopped {
		return
	}
	w := &keyWatch{key: l.key, from: l.ownFrom, owner: l}
	if l.d.hub.add(w) {
		l.own = w
	}
}

// watchResponse implements watchOwner for the watch of our key: an event
// is the loss unless it is the put of one of our Proclaims; a cancellation
// by the server (its start revision compacted, a refusal) has the key
// checked after a pause and watched again.
func (l *lease) watchResponse(w *keyWatch, resp *pb.WatchResponse) {
	if len(resp.Events) > 0 {
		l.mu.Lock()
		var foreign *clientv3.Event
		for _, ev := range resp.Events {
			if ev.Type != mvccpb.PUT || !l.ownKV(ev.Kv, false) {
				foreign = ev
				break
			}
		}
		l.mu.Unlock()
		if foreign != nil {
			// A delete, or someone else's put.
			l.d.hub.remove(w)
			l.reportOwnKeyEvent(w.key, foreign)
		}
		return
	}
	if !resp.Canceled {
		return // created
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ownStopped || l.own != w {
		return
	}
	l.own = nil
	l.ownBackoff = min(max(2*l.ownBackoff, 10*time.Millisecond), waitRetryMax)
	l.ownTimer = time.AfterFunc(l.ownBackoff, l.checkOwnKey)
}

// checkOwnKey reads our key after its watch failed, reports the loss if it
// is gone or was overwritten, and otherwise watches it again from the
// revision read.
func (l *lease) checkOwnKey() {
	l.mu.Lock()
	if l.ownStopped || !l.d.track() {
		l.mu.Unlock()
		return // released, or the driver is closed: renewal finds out
	}
	defer l.d.bg.Done()
	ctx, cancel := context.WithTimeout(l.d.hub.ctx, revokeTimeout)
	defer cancel()
	l.ownCheck = cancel
	key := l.key
	l.mu.Unlock()

	resp, err := l.d.client.Get(ctx, key)
	var lost error
	switch {
	case err != nil:
	case len(resp.Kvs) == 0:
		lost = l.keyGone(ctx, key, "")
	case !l.ownState(resp.Kvs[0]):
		lost = fmt.Errorf("%w: etcd: lock key %q was overwritten by another client (now at revision %d)", backend.ErrDeleted, key, resp.Kvs[0].ModRevision)
	}
	if lost != nil {
		l.lost(lost)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ownCheck = nil
	if l.ownStopped {
		return
	}
	if err != nil {
		l.ownBackoff = min(2*l.ownBackoff, waitRetryMax)
		l.ownTimer = time.AfterFunc(l.ownBackoff, l.checkOwnKey)
		return
	}
	l.ownFrom = resp.Header.Revision + 1
	l.ownTimer = time.AfterFunc(0, l.startOwnWatch)
}

// stopWatchingOwnKey stops the watch of watchOwnKey, or keeps it from
// starting, and cancels a check in flight; a check's goroutine ends on its
// own, soon (the driver's Shutdown waits for it).
func (l *lease) stopWatchingOwnKey() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ownStopped = true
	if l.ownTimer != nil {
		l.ownTimer.Stop()
	}
	if l.own != nil {
		l.d.hub.remove(l.own)
		l.own = nil
	}
	if l.ownCheck != nil {
		l.ownCheck()
	}
}

// KeepAlive implements driver.Lease with one LeaseKeepAliveOnce.
func (l *lease) KeepAlive(ctx context.Context) (time.Time, error) {
	l.mu.Lock()
	id, fromPool, st := l.id, l.fromPool, l.st
	l.mu.Unlock()
	if st == stReleased {
		// The lease may be back in the pool, another acquisition's now.
		return time.Time{}, fmt.Errorf("%w: etcd: keepalive after release", backend.ErrReleased)
	}
	if err := l.d.clientClosed(); err != nil {
		return time.Time{}, err
	}
	sent := time.Now()
	_, err := l.d.client.KeepAliveOnce(ctx, id)
	if err == nil {
		l.mu.Lock()
		if l.id == id && sent.After(l.sent) {
			l.sent = sent
		}
		l.mu.Unlock()
		if err := l.keepKeyLease(ctx); err != nil {
			return time.Time{}, err
		}
		return sent, nil
	}
	if isLeaseNotFound(err) {
		if fromPool && l.noKeyYet() {
			// An idle lease found gone before Lock wrote a key with it: take
			// a fresh one, as Lock would.
			// sent is before the new grant's: the deadline errs early.
			if _, rerr := l.regrant(ctx, id); rerr != nil {
				return time.Time{}, rerr
			}
			return sent, nil
		}
		l.setDoubtful()
		return time.Time{}, leaseGone(id)
	}
	return time.Time{}, fmt.Errorf("etcd: keepalive lease %x: %w", int64(id), l.d.mapErr(err))
}

func (l *lease) noKeyYet() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st == stIdle || l.st == stUnknown
}

// Release implements driver.Lease.
func (l *lease) Release(ctx context.Context, lost bool) error {
	l.stopWatchingOwnKey()
	if err := l.d.clientClosed(); err != nil {
		return err
	}

	l.mu.Lock()
	st, id, key, rev, doubtful := l.st, l.id, l.key, l.rev, l.doubtful
	idle := idleLease{id: l.id, sent: l.sent}
	l.mu.Unlock()

	switch {
	case st == stIdle:
		if doubtful {
			if err := l.revoke(ctx, id); err != nil {
				return err
			}
		} else {
			l.d.put(l.ttl, idle)
		}
		if l.keyLease != 0 {
			if err := l.revoke(ctx, l.keyLease); err != nil {
				return err
			}
		}
		l.finish()
		return nil
	case st == stUnknown:
		// Whether the put applied is unknown: revoking the lease removes
		// the key if it exists.
		if err := l.revoke(ctx, l.keyLeaseOf(id)); err != nil {
			return err
		}
		if l.keyLease != 0 {
			l.d.revokeAsync(id)
		}
		l.finish()
		return nil
	case lost && st == stHeld && l.keyLease != 0:
		// A holder lost before its release leaves its key to its key
		// lease: the lock-delay (see lockdelay.go). A waiter's goes.
		l.d.revokeAsync(id)
		l.finish()
		return nil
	}

	resp, err := l.d.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd: release txn: %w", l.d.mapErr(err))
	}
	if l.keyLease != 0 {
		l.d.revokeAsync(l.keyLease)
	}
	if resp.Succeeded && !doubtful {
		l.d.put(l.ttl, idle)
		l.finish()
		return nil
	}
	l.d.revokeAsync(id)
	if resp.Succeeded || st != stHeld {
		l.finish()
		return nil
	}
	l.finish()
	return fmt.Errorf("%w: etcd: lock key %q (token %d) was already gone at release", backend.ErrDeleted, key, rev)
}

// revoke revokes id now; a lease already gone is fine.
func (l *lease) revoke(ctx context.Context, id clientv3.LeaseID) error {
	if _, err := l.d.client.Revoke(ctx, id); err != nil && !isLeaseNotFound(err) {
		return fmt.Errorf("etcd: revoke lease %x: %w", int64(id), l.d.mapErr(err))
	}
	return nil
}

// finish marks the lease released (backend calls Release no more once it
// succeeded), so that a renewal in flight does not renew a pooled lease.
func (l *lease) finish() {
	l.mu.Lock()
	l.st = stReleased
	l.mu.Unlock()
}
