package etcdfence_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/etcdfence"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/internal/etcdtest"
)

type store struct {
	*etcdfence.Guard
	c      *clientv3.Client
	prefix string
}

func (s store) Put(res, v string) func(context.Context) error {
	return func(ctx context.Context) error {
		etcdfence.Ops(ctx).Put(s.prefix+"data/"+res, v)
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
	fencetest.Run(t, fencetest.Harness{
		Rollback: true,
		Open: func(t *testing.T) fencetest.Store {
			c := srv.NewClient(t)
			prefix := "/" + t.Name() + "/" // one state per subtest
			return store{etcdfence.New(c, prefix+"fence/"), c, prefix}
		},
	})
}

func TestHeldBy(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.NewClient(t)
	ctx := context.Background()
	g := etcdfence.New(c, "/fence/")
	put, err := c.Put(ctx, "/locks/job/holder", "A")
	require.NoError(t, err)
	tok := fencing.Token(put.Header.Revision) // the lock key's create revision
	write := func(v string) func(context.Context) error {
		return func(ctx context.Context) error {
			o := etcdfence.Ops(ctx)
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
}

func TestLargeTokens(t *testing.T) {
	srv := etcdtest.Start(t)
	g := etcdfence.New(srv.NewClient(t), "/f/")
	ctx := context.Background()
	require.NoError(t, fencing.Admit(ctx, g, "r", 9))
	require.NoError(t, fencing.Admit(ctx, g, "r", 10), "10 > 9 although \"10\" < \"9\" as bytes")
	require.NoError(t, fencing.Admit(ctx, g, "r", ^fencing.Token(0)))
	assert.ErrorIs(t, fencing.Admit(ctx, g, "r", 1<<63), fencing.ErrStaleToken)
}
