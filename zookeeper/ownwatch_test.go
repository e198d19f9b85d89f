package zookeeper

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/zktest"
)

// ownWatchTTL is long enough that no renewal (every TTL/3) runs within
// ownWatchNotice: a loss seen in time was seen by the watch on our node.
const ownWatchTTL = 30 * time.Second

// ownWatchNotice bounds how long the loss of a deleted node may take to be
// reported through the watch (on a busy machine).
const ownWatchNotice = 5 * time.Second

// TestOwnNodeDeletedIsLoss deletes a holder's node from another session and
// requires the loss signal well before the next renewal, whichever way the
// watch on our node was set and dispatched: on a Conn the Locker dialed
// (its event callback) and on a caller's Conn (New: the session's poll
// loop); for a lock granted at once (the watch set after ownWatchDelay) and
// after a wait (the wait's watch, kept); after someone wrote our node's
// data, or a candidate's Proclaim did (either fires the watch: it must be
// set again, and is no loss); and after the connection dropped and came
// back (go-zookeeper sets the watches again).
func TestOwnNodeDeletedIsLoss(t *testing.T) {
	admin := srv.Connect(t, 10*time.Second)
	for _, mode := range []string{"dialed", "given"} {
		for _, how := range []string{"free", "waited", "data-written", "proclaimed", "reconnected"} {
			t.Run(mode+"/"+how, func(t *testing.T) {
				pfx := testPrefix(t)
				p := zktest.NewProxy(t, srv.Addr())
				var l *backend.Locker
				if mode == "dialed" {
					l = dialLocker(t, p.Addr(), pfx, ownWatchTTL)
				} else {
					var err error
					l, err = New(zktest.ConnectTo(t, p.Addr(), ownWatchTTL), Config{Prefix: pfx})
					require.NoError(t, err)
					t.Cleanup(func() { _ = l.Close() })
				}
				var opts []backend.Option
				if how == "proclaimed" {
					opts = append(opts, backend.WithValue("one"))
				}
				ls := ownWatchHolder(t, l, pfx, how == "waited", opts...)
				path, _ := nodeOf(t, admin, pfx, ls)
				switch how {
				case "data-written":
					_, err := admin.Set(path, []byte(`{"holder":"someone"}`), -1)
					require.NoError(t, err)
					time.Sleep(200 * time.Millisecond) // the watch is set again
				case "proclaimed":
					require.NoError(t, ls.Proclaim(tctx(t, 10*time.Second), "two"))
					time.Sleep(200 * time.Millisecond) // the watch is set again
				case "reconnected":
					_, changed := ls.Suspended()
					p.Cut()
					requireReconnected(t, ls, changed)
				}
				require.NoError(t, ls.Err())
				require.NoError(t, admin.Delete(path, -1))
				select {
				case <-ls.Done():
				case <-time.After(ownWatchNotice):
					t.Fatalf("no loss signal within %v of our node's deletion", ownWatchNotice)
				}
				require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
				require.ErrorIs(t, ls.Err(), backend.ErrDeleted, "the loss names its cause")
				require.NotErrorIs(t, ls.Err(), backend.ErrSessionLost)
				require.ErrorIs(t, ls.Release(tctx(t, 5*time.Second)), backend.ErrLeaseLost)
			})
		}
	}
}

// ownWatchHolder returns a lease on a lock of l, acquired with opts, whose
// node is watched: one granted at once and held past ownWatchDelay, or
// (waited) one granted after another Locker's holder let go.
func ownWatchHolder(t *testing.T, l *backend.Locker, pfx string, waited bool, opts ...backend.Option) *backend.Lease {
	t.Helper()
	if !waited {
		ls := mustTry(t, l, "own", opts...)
		time.Sleep(4 * ownWatchDelay)
		return ls
	}
	other := dialLocker(t, srv.Addr(), pfx, ownWatchTTL)
	first := mustTry(t, other, "own")
	ch := goAcquire(tctx(t, 30*time.Second), l, "own", opts...)
	waitNodes(t, srv.Connect(t, 10*time.Second), pfx, "own", 2)
	time.Sleep(100 * time.Millisecond) // the waiter's watches are set
	release(t, first)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	return r.Lease
}

// requireReconnected waits for the lease's connection to change state (go
// down: changed is from before the cut) and be up again.
func requireReconnected(t *testing.T, ls *backend.Lease, changed <-chan struct{}) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the connection did not come back within 15s of the cut")
		}
		var susp bool
		susp, changed = ls.Suspended()
		if !susp {
			return
		}
	}
}
