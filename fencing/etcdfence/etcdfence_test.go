package etcdfence_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/etcdfence"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/freeport"
)

type store struct {
	*etcdfence.Guard
	c      *clientv3.Client
	prefix string
}

func (s store) Put(res, v string) func(context.Context, *etcdfence.Txn) error {
	return func(_ context.Context, t *etcdfence.Txn) error {
		t.Put(s.prefix+"data/"+res, v)
		return nil
	}
}

func (s store) Get(ctx context.Context, res string) (string, error) {
	r, err := s.c.Get(ctx, s.prefix+"data/"+res)
	if err != nil || len(r.Kvs) == 0 {
		return "", err
	}
	return string(r.Kvs[0].Value), nil
}

func TestConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	fencetest.Run(t, fencetest.Harness[*etcdfence.Txn]{
		Rollback: true,
		Kind:     "etcd",
		Open: func(t *testing.T, tel fencing.Telemetry) fencetest.Store[*etcdfence.Txn] {
			c := srv.NewClient(t)
			prefix := "/" + t.Name() + "/" // one state per subtest
			return store{newGuard(t, c, etcdfence.WithPrefix(prefix+"fence/"), etcdfence.WithTelemetry(tel)), c, prefix}
		},
		Remote: func(t *testing.T) (fencetest.Store[*etcdfence.Txn], fencetest.Link) {
			p, err := faultproxy.Start(strings.TrimPrefix(srv.Endpoints()[0], "http://"))
			require.NoError(t, err)
			t.Cleanup(p.Close)
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + p.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			prefix := "/" + t.Name() + "/"
			return store{newGuard(t, c, etcdfence.WithPrefix(prefix+"fence/")), c, prefix}, p
		},
		Unreachable: func(t *testing.T, tel fencing.Telemetry) fencing.StoreGuard[*etcdfence.Txn] {
			port, err := freeport.Port()
			require.NoError(t, err)
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{fmt.Sprintf("http://127.0.0.1:%d", port)}, Logger: zap.NewNop()})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			return newGuard(t, c, etcdfence.WithTelemetry(tel))
		},
	})
}

func TestHeldBy(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.NewClient(t)
	ctx := context.Background()
	g := newGuard(t, c, etcdfence.WithPrefix("/fence/"))
	put, err := c.Put(ctx, "/locks/job/holder", "A")
	require.NoError(t, err)
	tok := fencing.Token(put.Header.Revision) // the lock key's create revision
	write := func(v string) func(context.Context, *etcdfence.Txn) error {
		return func(_ context.Context, o *etcdfence.Txn) error {
			o.If(etcdfence.HeldBy("/locks/job/holder", tok))
			o.Put("/data/job", v)
			return nil
		}
	}
	require.NoError(t, g.Do(ctx, "job", tok, write("v1")))
	_, err = c.Delete(ctx, "/locks/job/holder") // the lease expired
	require.NoError(t, err)
	err = g.Do(ctx, "job", tok, write("v2"))
	require.ErrorIs(t, err, etcdfence.ErrConditionFailed, "refused before any newer holder wrote")
	r, err := c.Get(ctx, "/data/job")
	require.NoError(t, err)
	assert.Equal(t, "v1", string(r.Kvs[0].Value))

	_, err = c.Put(ctx, "/locks/job/holder", "B") // re-created: a new create revision
	require.NoError(t, err)
	require.ErrorIs(t, g.Do(ctx, "job", tok, write("v3")), etcdfence.ErrConditionFailed)
	h, err := g.Highest(ctx, "job")
	require.NoError(t, err)
	assert.Equal(t, tok, h)

	// A transaction etcd refuses was not applied either: its error is
	// returned as it is, not as an unknown outcome.
	err = g.Do(ctx, "job", tok, func(_ context.Context, tx *etcdfence.Txn) error {
		tx.Put("/fence/job", "the token key, twice in one Txn")
		return nil
	})
	require.ErrorIs(t, err, rpctypes.ErrDuplicateKey)
	assert.NotErrorIs(t, err, fencing.ErrOutcomeUnknown)
}

func TestLargeTokens(t *testing.T) {
	srv := etcdtest.Start(t)
	g := newGuard(t, srv.NewClient(t), etcdfence.WithPrefix("/f/"))
	ctx := context.Background()
	require.NoError(t, g.Admit(ctx, "r", 9))
	require.NoError(t, g.Admit(ctx, "r", 10), "10 > 9 although \"10\" < \"9\" as bytes")
	require.NoError(t, g.Admit(ctx, "r", ^fencing.Token(0)))
	assert.ErrorIs(t, g.Admit(ctx, "r", 1<<63), fencing.ErrStaleToken)
}

func newGuard(t *testing.T, c *clientv3.Client, opts ...etcdfence.Option) *etcdfence.Guard {
	g, err := etcdfence.New(c, opts...)
	require.NoError(t, err)
	return g
}

// The Txn is the atomic handle: a token admitted while the write function
// runs (nothing is held meanwhile) makes the etcd transaction skip what was
// staged on t, while a put sent on the client directly in the same write
// function has landed already.
func TestTxnIsTheAtomicHandle(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.NewClient(t)
	ctx := context.Background()
	g, other := newGuard(t, c), newGuard(t, srv.NewClient(t))
	require.NoError(t, g.Do(ctx, "r", 5, func(_ context.Context, tx *etcdfence.Txn) error {
		tx.Put("/data/r", "by 5")
		return nil
	}))
	err := g.Do(ctx, "r", 5, func(ctx context.Context, tx *etcdfence.Txn) error {
		require.NoError(t, other.Admit(ctx, "r", 6)) // a newer holder, during the write
		tx.Put("/data/r", "by 5, staged")
		_, err := c.Put(ctx, "/data/escaped", "by 5, on the client")
		return err
	})
	var st *fencing.StaleTokenError
	require.ErrorAs(t, err, &st)
	assert.Equal(t, fencing.StaleTokenError{Resource: "r", Token: 5, Highest: 6}, *st)
	get := func(key string) string {
		r, err := c.Get(ctx, key)
		require.NoError(t, err)
		require.Len(t, r.Kvs, 1, key)
		return string(r.Kvs[0].Value)
	}
	assert.Equal(t, "by 5", get("/data/r"), "the staged put was not applied")
	assert.Equal(t, "by 5, on the client", get("/data/escaped"), "a put on the client escapes the fence")
	r, err := c.Get(ctx, etcdfence.DefaultPrefix+"r")
	require.NoError(t, err)
	require.Len(t, r.Kvs, 1, "the token key is under DefaultPrefix")

	ran := false
	err = g.Gate().Do(ctx, "r", 5, func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, fencing.ErrStaleToken)
	assert.False(t, ran, "the pre-check turns an already stale token away")
}

func TestNewOptions(t *testing.T) {
	_, err := etcdfence.New(nil)
	assert.Error(t, err)
	srv := etcdtest.Start(t)
	_, err = etcdfence.New(srv.NewClient(t), etcdfence.WithPrefix(""))
	assert.Error(t, err)
}
