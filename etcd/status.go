package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

// Inspect implements driver.Driver: one read of the name's keys in
// create-revision order (the holder first, then the queue), and one
// TimeToLive per key for the TTL left, inspectParallel at a time. An
// entry's ID is its key and the key's create revision (see entryID), and
// its Value the key's raw value: a candidate's value, a lock acquisition's
// JSON record, or what another library wrote. Holder and Metadata are read
// from the value where it is such a JSON record: keys of concurrency.Mutex
// or etcdctl holders, and candidates' keys (unless their value happens to
// be such a record), show with an empty holder.
func (d *etcdDriver) Inspect(ctx context.Context, name string) (driver.Status, error) {
	if err := d.clientClosed(); err != nil {
		return driver.Status{}, err
	}
	resp, err := d.client.Get(ctx, nameDir(d.prefix, name), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return driver.Status{}, fmt.Errorf("etcd: status: %w", d.mapErr(err))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg      sync.WaitGroup
		slots   = make(chan struct{}, inspectParallel)
		entries = make([]driver.Entry, len(resp.Kvs))
	)
	for i, kv := range resp.Kvs {
		e := &entries[i]
		*e = driver.Entry{ID: entryID(string(kv.Key), kv.CreateRevision), Token: fencing.Token(kv.CreateRevision), TTLLeft: -1,
			Value: string(kv.Value)}
		var v keyValue
		if json.Unmarshal(kv.Value, &v) == nil {
			e.Holder, e.Metadata = v.Holder, v.Metadata
		}
		if kv.Lease == 0 {
			continue
		}
		slots <- struct{}{} // the calls in flight end soon after ctx does
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			ttl, err := d.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				cancel(fmt.Errorf("etcd: status: lease of %q: %w", kv.Key, d.mapErr(err)))
				return
			}
			if ttl.TTL >= 0 {
				e.TTLLeft = time.Duration(ttl.TTL) * time.Second
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return driver.Status{}, err
	}
	return driver.Queued(entries), nil
}

// inspectParallel is how many TimeToLive calls Inspect keeps in flight: a
// queue of 1,000 waiters is inspected in 1/16 of the round trips.
const inspectParallel = 16

// Revoke implements driver.Driver: it finds the key of name created at
// revision token and revokes its lease (which deletes the key), or deletes
// the key if it has no lease; 2 round trips.
func (d *etcdDriver) Revoke(ctx context.Context, name string, token fencing.Token) (bool, error) {
	if err := d.clientClosed(); err != nil {
		return false, err
	}
	rev := int64(token)
	resp, err := d.client.Get(ctx, nameDir(d.prefix, name), clientv3.WithPrefix(),
		clientv3.WithMinCreateRev(rev), clientv3.WithMaxCreateRev(rev))
	if err != nil {
		return false, fmt.Errorf("etcd: revoke: %w", d.mapErr(err))
	}
	if len(resp.Kvs) == 0 {
		return false, nil
	}
	kv := resp.Kvs[0]
	if kv.Lease != 0 {
		if _, err := d.client.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !isLeaseNotFound(err) {
			return false, fmt.Errorf("etcd: revoke lease %x: %w", kv.Lease, d.mapErr(err))
		}
		return true, nil
	}
	del, err := d.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", rev)).
		Then(clientv3.OpDelete(string(kv.Key))).Commit()
	if err != nil {
		return false, fmt.Errorf("etcd: revoke: delete %q: %w", kv.Key, d.mapErr(err))
	}
	return del.Succeeded, nil
}

// entryID is the driver.Entry.ID of the acquisition whose key was created
// at revision rev: "<key>@<rev>". The key alone would not do: a Locker
// reuses its idle leases, and with them their keys, so a later acquisition
// of the same name may write the same key again.
func entryID(key string, rev int64) string {
	return key + "@" + strconv.FormatInt(rev, 10)
}

// parseEntryID returns the key and create revision in id, an entryID of a
// key directly under dir, or an error matching backend.ErrInvalidOption.
func parseEntryID(dir, id string) (key string, rev int64, err error) {
	i := strings.LastIndexByte(id, '@')
	if i < 0 {
		return "", 0, fmt.Errorf("%w: etcd: acquisition id %q is not \"<key>@<create revision>\"", backend.ErrInvalidOption, id)
	}
	key = id[:i]
	rev, err = strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || rev <= 0 {
		return "", 0, fmt.Errorf("%w: etcd: acquisition id %q has no create revision", backend.ErrInvalidOption, id)
	}
	child, ok := strings.CutPrefix(key, dir)
	if !ok || child == "" || strings.Contains(child, "/") {
		return "", 0, fmt.Errorf("%w: etcd: acquisition id %q is not of a key directly under %q", backend.ErrInvalidOption, id, dir)
	}
	return key, rev, nil
}

// RevokeID implements driver.Driver with one Txn: it deletes the key in
// id if it still has the create revision in id. A holder's watch on its own
// key reports the loss, a waiter's ends its wait with ErrLeaseLost, and the
// next waiter's watch on its predecessor grants it the lock; the lease
// behind the key is revoked by its own Locker when it finds the key gone.
func (d *etcdDriver) RevokeID(ctx context.Context, name, id string) (bool, error) {
	if err := d.clientClosed(); err != nil {
		return false, err
	}
	key, rev, err := parseEntryID(nameDir(d.prefix, name), id)
	if err != nil {
		return false, err
	}
	resp, err := d.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, fmt.Errorf("etcd: revoke: delete %q: %w", key, d.mapErr(err))
	}
	return resp.Succeeded, nil
}
