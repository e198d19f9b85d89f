package etcd

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/locktest"
)

// A loss names what etcd showed (issue 33): the lease revoked (etcdctl
// lease revoke) is ErrRevoked, though the key's deletion event comes
// before any renewal; the key deleted while the lease lives (etcdctl del)
// is ErrDeleted. Locker.Revoke revokes the lease (ErrRevoked), RevokeID
// deletes the key (ErrDeleted). Each
// matches ErrLeaseLost, and none the other causes.
func TestLossCauses(t *testing.T) {
	h := &harness{prefix: testPrefix(t), admin: client(t)}
	admin := h.NewLocker(t)
	for _, c := range []struct {
		name string
		want error
		end  func(t *testing.T, ls *backend.Lease)
	}{
		{"LeaseRevoked", backend.ErrRevoked, func(t *testing.T, ls *backend.Lease) { h.Revoke(t, ls) }},
		{"KeyDeleted", backend.ErrDeleted, func(t *testing.T, ls *backend.Lease) {
			ctx := tctx(t, 10*time.Second)
			resp, err := h.admin.Delete(ctx, nameDir(h.prefix, ls.Name()), clientv3.WithPrefix())
			require.NoError(t, err)
			require.EqualValues(t, 1, resp.Deleted)
		}},
		{"LockerRevoke", backend.ErrRevoked, func(t *testing.T, ls *backend.Lease) {
			found, err := admin.Revoke(tctx(t, 10*time.Second), ls.Name(), ls.Token())
			require.NoError(t, err)
			require.True(t, found)
		}},
		{"LockerRevokeID", backend.ErrDeleted, func(t *testing.T, ls *backend.Lease) {
			ctx := tctx(t, 10*time.Second)
			st, err := admin.Status(ctx, ls.Name())
			require.NoError(t, err)
			require.NotNil(t, st.Holder)
			found, err := admin.RevokeID(ctx, ls.Name(), st.Holder.ID)
			require.NoError(t, err)
			require.True(t, found)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := h.NewLocker(t)
			// A long TTL: no renewal comes before the watch reports the loss.
			ls, err := l.TryAcquire(tctx(t, 10*time.Second), c.name, backend.WithTTL(30*time.Second))
			require.NoError(t, err)
			time.Sleep(2 * ownWatchDelay) // the key's watch is in place
			c.end(t, ls)
			select {
			case <-ls.Done():
			case <-time.After(10 * time.Second):
				require.FailNow(t, "no loss signal")
			}
			require.ErrorIs(t, ls.Err(), c.want)
			require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
			for _, other := range []error{backend.ErrRevoked, backend.ErrDeleted, backend.ErrExpired, backend.ErrSessionLost, backend.ErrDeadline} {
				if other != c.want {
					require.NotErrorIs(t, ls.Err(), other)
				}
			}
			t.Logf("%v", ls.Err())
		})
	}
}

// A holder cut off by a partition (a proxy that holds every byte) loses
// its lease at its local deadline, with ErrDeadline: no renewal answered,
// and whether etcd still keeps the lease is unknown.
func TestLossCausePartitioned(t *testing.T) {
	px, err := faultproxy.Start(strings.TrimPrefix(srv.Endpoints()[0], "http://"))
	require.NoError(t, err)
	defer px.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + px.Addr()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer c.Close()
	l, err := New(c, Config{Prefix: testPrefix(t)})
	require.NoError(t, err)
	defer l.Close()
	ls, err := l.TryAcquire(tctx(t, 10*time.Second), "p", backend.WithTTL(2*time.Second))
	require.NoError(t, err)
	px.Partition()
	defer px.Heal()
	locktest.PartitionedLossIsDeadline(t, ls)
}
