package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

// Inspect implements backend.Inspector: one read of the name's keys in
// create-revision order (the holder first, then the queue), and one
// TimeToLive per key for the TTL left. Keys of concurrency.Mutex or etcdctl
// holders show with an empty holder.
func (d *driver) Inspect(ctx context.Context, name string) (backend.Status, error) {
	resp, err := d.client.Get(ctx, nameDir(d.prefix, name), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return backend.Status{}, fmt.Errorf("etcd: status: %w", err)
	}
	var st backend.Status
	for i, kv := range resp.Kvs {
		e := backend.Entry{Token: fencing.Token(kv.CreateRevision), TTLLeft: -1}
		var v keyValue
		if json.Unmarshal(kv.Value, &v) == nil {
			e.Holder, e.Metadata = v.Holder, v.Metadata
		}
		if kv.Lease != 0 {
			ttl, err := d.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				return backend.Status{}, fmt.Errorf("etcd: status: lease of %q: %w", kv.Key, err)
			}
			if ttl.TTL >= 0 {
				e.TTLLeft = time.Duration(ttl.TTL) * time.Second
			}
		}
		if i == 0 {
			st.Holder = &e
		} else {
			st.Waiters = append(st.Waiters, e)
		}
	}
	return st, nil
}
