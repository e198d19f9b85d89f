package etcd

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
)

// Proclaim implements driver.Lease with one Txn: it puts value on our key,
// attached to our lease as before, only if the key still has our create
// revision (the token) and our lease; else it writes nothing and returns an
// error matching backend.ErrLeaseLost that says what became of the key. The
// put changes the key's mod revision only: the waiters queued behind it
// watch it for deletes alone, and Release and the waits compare create
// revisions, so none of them takes it for a release or a new key; the
// watch of our own key knows it for ours (see ownKV).
func (l *lease) Proclaim(ctx context.Context, value string) error {
	l.mu.Lock()
	st, id, key, rev := l.st, l.keyLeaseOf(l.id), l.key, l.rev
	if st == stHeld {
		l.proclaimed = append(l.proclaimed, value)
	}
	l.mu.Unlock()
	switch st {
	case stHeld:
	case stReleased:
		return fmt.Errorf("%w: etcd: proclaim after release", backend.ErrReleased)
	default:
		return fmt.Errorf("etcd: proclaim: the lock was not granted to this acquisition")
	}
	if err := l.d.clientClosed(); err != nil {
		l.unproclaim()
		return err
	}
	resp, err := l.d.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev),
			clientv3.Compare(clientv3.LeaseValue(key), "=", int64(id))).
		Then(clientv3.OpPut(key, value, clientv3.WithLease(id))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		if isLeaseNotFound(err) {
			// Refused: our lease, and with it our key, is gone.
			l.unproclaim()
			return fmt.Errorf("etcd: proclaim: %w", leaseGone(id))
		}
		// The put may or may not have been applied: its value stays in
		// proclaimed, so that its event is not taken for someone else's.
		return fmt.Errorf("etcd: proclaim: %w", l.d.mapErr(err))
	}
	if !resp.Succeeded {
		l.unproclaim()
		var now *mvccpb.KeyValue
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			now = kvs[0]
		}
		if now == nil {
			return fmt.Errorf("etcd: proclaim: nothing written: %w", l.keyGone(ctx, key, ""))
		}
		return fmt.Errorf("%w: etcd: proclaim: %s; nothing written", backend.ErrDeleted, keyFate(key, rev, now))
	}
	l.mu.Lock()
	l.value = value
	l.mu.Unlock()
	return nil
}

// unproclaim forgets the value of the last Proclaim, which was not
// written.
func (l *lease) unproclaim() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.proclaimed); n > 0 {
		l.proclaimed = l.proclaimed[:n-1]
	}
}

// keyFate says what became of our key, created at revision rev, given now,
// its current state (not nil: keyGone says why none is left).
func keyFate(key string, rev int64, now *mvccpb.KeyValue) string {
	if now.CreateRevision != rev {
		return fmt.Sprintf("lock key %q (token %d) was deleted and written again at revision %d", key, rev, now.CreateRevision)
	}
	return fmt.Sprintf("lock key %q was overwritten by another client at revision %d (detached from its lease)", key, now.ModRevision)
}

// ownKV reports whether kv, our key as a put event (stored false) or a
// read (stored true) shows it, is of this acquisition's own writing: its
// create revision and lease are ours, and its value is one of proclaimed,
// or, for a read, the value we know to be stored. A Proclaim's put event
// may arrive before its Txn's answer (or after an answer that was lost),
// hence proclaimed. Events and reads come in revision order: the value
// matched is then known to be stored, and it and those proclaimed before
// it are forgotten, as their events, if any, came before. Another
// client's put of the very value we wrote, keeping our lease, passes for
// ours: it changes nothing. l.mu is held.
func (l *lease) ownKV(kv *mvccpb.KeyValue, stored bool) bool {
	if kv.CreateRevision != l.rev || kv.Lease != int64(l.keyLeaseOf(l.id)) {
		return false
	}
	for i, v := range l.proclaimed {
		if v == string(kv.Value) {
			l.value = v
			l.proclaimed = l.proclaimed[i+1:]
			return true
		}
	}
	return stored && l.value == string(kv.Value)
}

// ownState is ownKV for a read of our key.
func (l *lease) ownState(kv *mvccpb.KeyValue) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ownKV(kv, true)
}
