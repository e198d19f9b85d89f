package etcd

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
)

// A fencelock candidate (an acquisition WithValue of name N) and an etcd
// concurrency.Election on prefix+"/"+url.PathEscape(N) are candidates of
// one election, both ways: each reads the other's leader value and waits
// for the other's leader to resign, and each one's Proclaim is seen by the
// other.
func TestInteropElection(t *testing.T) {
	pfx := testPrefix(t)
	const name = "svc a/b" // escaped: svc%20a%2Fb
	l := locker(t, pfx, backend.WithTTL(long))
	sess, err := concurrency.NewSession(client(t), concurrency.WithTTL(30))
	require.NoError(t, err)
	defer sess.Close()
	e := concurrency.NewElection(sess, pfx+"/"+url.PathEscape(name))
	ctx := tctx(t, 60*time.Second)
	leader := func() *clientv3.GetResponse {
		t.Helper()
		resp, err := e.Leader(ctx)
		require.NoError(t, err)
		return resp
	}
	observed := e.Observe(ctx)
	observe := func(want string, rev int64) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case resp, ok := <-observed:
				require.True(t, ok, "Observe ended")
				if kv := resp.Kvs[0]; string(kv.Value) == want {
					assert.Equal(t, rev, kv.CreateRevision)
					return
				}
			case <-deadline:
				require.FailNowf(t, "not observed", "Observe did not report %q", want)
			}
		}
	}

	// A fencelock candidate leads: the Election reads its value, sees its
	// Proclaims, and campaigns until it resigns.
	h, err := l.Acquire(ctx, name, backend.WithValue("a"))
	require.NoError(t, err)
	resp := leader()
	assert.Equal(t, "a", string(resp.Kvs[0].Value))
	assert.Equal(t, int64(h.Token()), resp.Kvs[0].CreateRevision)
	observe("a", int64(h.Token()))
	campaign := make(chan error, 1)
	go func() { campaign <- e.Campaign(ctx, "b") }()
	waitKeys(t, client(t), pfx, name, 2)
	require.NoError(t, h.Proclaim(ctx, "a2"))
	assert.Equal(t, "a2", string(leader().Kvs[0].Value))
	observe("a2", int64(h.Token()))
	select {
	case err := <-campaign:
		t.Fatalf("Campaign returned while the fencelock candidate leads: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, h.Err())
	release(t, h)
	select {
	case err := <-campaign:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Campaign did not win after the fencelock candidate resigned")
	}
	resp = leader()
	assert.Equal(t, "b", string(resp.Kvs[0].Value))
	eRev := resp.Kvs[0].CreateRevision
	assert.Greater(t, eRev, int64(h.Token()))
	observe("b", eRev)

	// The Election leads: Status shows its value, its Proclaims, and a
	// fencelock candidate waits until it resigns.
	st, err := l.Status(ctx, name)
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "b", st.Holder.Value)
	assert.Equal(t, "", st.Holder.Holder)
	assert.Equal(t, eRev, int64(st.Holder.Token))
	ch := goAcquire(ctx, l, name, backend.WithValue("c"))
	waitKeys(t, client(t), pfx, name, 2)
	require.NoError(t, e.Proclaim(ctx, "b2"))
	st, err = l.Status(ctx, name)
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "b2", st.Holder.Value)
	require.Len(t, st.Waiters, 1)
	assert.Equal(t, "c", st.Waiters[0].Value)
	requireBlocked(t, ch, 300*time.Millisecond)
	require.NoError(t, e.Resign(ctx))
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	assert.Greater(t, int64(r.Lease.Token()), eRev)
	assert.Equal(t, "c", string(leader().Kvs[0].Value))
	observe("c", int64(r.Lease.Token()))
	release(t, r.Lease)
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, concurrency.ErrElectionNoLeader)
}

// Package election over etcd: a term's Proclaim is observed with the same
// token, and a concurrency.Election leader is reported as the leader, with
// its value.
func TestElectorOverEtcd(t *testing.T) {
	pfx := testPrefix(t)
	el, err := election.New(locker(t, pfx, backend.WithTTL(long)), election.WithPollInterval(10*time.Millisecond))
	require.NoError(t, err)
	ctx := tctx(t, 60*time.Second)
	observed, err := el.Observe(ctx, "svc")
	require.NoError(t, err)
	observe := func(want string) election.Leader {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case o, ok := <-observed:
				require.True(t, ok, "Observe ended")
				require.NoError(t, o.Err)
				if o.Leader != nil && o.Leader.Value == want {
					return *o.Leader
				}
			case <-deadline:
				require.FailNowf(t, "not observed", "Observe did not report %q", want)
			}
		}
	}

	term, err := el.Campaign(ctx, "svc", "a")
	require.NoError(t, err)
	assert.Equal(t, term.Token(), observe("a").Token)
	require.NoError(t, term.Proclaim(ctx, "a2"))
	assert.Equal(t, term.Token(), observe("a2").Token, "same term, new value")
	lead, err := el.Leader(ctx, "svc")
	require.NoError(t, err)
	assert.Equal(t, election.Leader{Name: "svc", Token: term.Token(), Value: "a2", ID: lead.ID}, lead)
	require.NoError(t, term.Resign(ctx))

	sess, err := concurrency.NewSession(client(t), concurrency.WithTTL(30))
	require.NoError(t, err)
	defer sess.Close()
	e := concurrency.NewElection(sess, pfx+"/svc")
	require.NoError(t, e.Campaign(ctx, "b"))
	b := observe("b")
	assert.Greater(t, b.Token, term.Token())
	require.NoError(t, e.Resign(ctx))
	_, err = el.Leader(ctx, "svc")
	require.ErrorIs(t, err, election.ErrNoLeader)
}
