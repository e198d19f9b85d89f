package backend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/internal/locktest"
)

func TestStatusOnMem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := mem.NewServer()
	a, err := mem.New(srv.Connect(), backend.WithHolder("a"), backend.WithTTL(10*time.Second))
	require.NoError(t, err)
	defer a.Close()
	b, err := mem.New(srv.Connect(), backend.WithHolder("b"))
	require.NoError(t, err)
	defer b.Close()

	st, err := a.Status(ctx, "s")
	require.NoError(t, err)
	assert.Nil(t, st.Holder, "a free lock has no holder")

	held, err := a.Acquire(ctx, "s", backend.WithMetadata(map[string]string{"job": "report"}))
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() {
		ls, err := b.Acquire(ctx, "s")
		if err == nil {
			err = ls.Release(ctx)
		}
		waiting <- err
	}()
	require.Eventually(t, func() bool { return srv.Queued("s") == 2 }, 5*time.Second, 5*time.Millisecond)

	st, err = b.Status(ctx, "s")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "s", st.Name)
	assert.Equal(t, "a", st.Holder.Holder)
	assert.Equal(t, map[string]string{"job": "report"}, st.Holder.Metadata)
	assert.Equal(t, held.Token(), st.Holder.Token)
	assert.Greater(t, st.Holder.TTLLeft, time.Duration(0))
	assert.LessOrEqual(t, st.Holder.TTLLeft, 10*time.Second)
	require.Len(t, st.Waiters, 1)
	assert.Equal(t, "b", st.Waiters[0].Holder)
	assert.Greater(t, st.Waiters[0].Token, held.Token())

	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-waiting)
	_, err = a.Status(ctx, "")
	assert.ErrorIs(t, err, backend.ErrInvalidName)
}

// noInspect stands for a backend that cannot list holders. Every real
// driver here can, so this test needs a stand-in; Status passes its
// errors.ErrUnsupported on.
type noInspect struct{ driver.Driver }

func (noInspect) Capabilities() driver.Capabilities { return driver.Capabilities{MinTTL: time.Second} }
func (noInspect) CheckTTL(time.Duration) error      { return nil }
func (noInspect) Inspect(context.Context, string) (driver.Status, error) {
	return driver.Status{}, fmt.Errorf("stand-in: %w", errors.ErrUnsupported)
}

func TestStatusUnsupported(t *testing.T) {
	l, err := backend.New(noInspect{})
	require.NoError(t, err)
	_, err = l.Status(context.Background(), "x")
	assert.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
}

func TestRevokeOnMem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := mem.NewServer()
	holder, err := mem.New(srv.Connect())
	require.NoError(t, err)
	defer holder.Close()
	admin, err := mem.New(srv.Connect())
	require.NoError(t, err)
	defer admin.Close()

	ls, err := holder.Acquire(ctx, "r")
	require.NoError(t, err)
	found, err := admin.Revoke(ctx, "r", ls.Token()+1)
	require.NoError(t, err)
	assert.False(t, found, "no acquisition has that token")
	found, err = admin.Revoke(ctx, "r", ls.Token())
	require.NoError(t, err)
	assert.True(t, found)
	select {
	case <-ls.Done():
	case <-ctx.Done():
		t.Fatal("the revoked holder was not told")
	}
	assert.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
}

func TestRevokeIDOnMem(t *testing.T) {
	srv := mem.NewServer()
	locker := func(opts ...backend.Option) *backend.Locker {
		l, err := mem.New(srv.Connect(), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	locktest.RevokeID(t, locker(backend.WithTTL(time.Minute)), locker(), [2]*backend.Locker{locker(), locker()}, "r", time.Second, 5*time.Second)
	found, err := locker().RevokeID(context.Background(), "r", "12345")
	require.NoError(t, err)
	assert.False(t, found)
}

func TestRevokeIDInput(t *testing.T) {
	ctx := context.Background()
	l, err := mem.New(mem.NewServer().Connect())
	require.NoError(t, err)
	defer l.Close()
	_, err = l.RevokeID(ctx, "r", "")
	assert.ErrorIs(t, err, backend.ErrInvalidOption)
	_, err = l.RevokeID(ctx, "", "1")
	assert.ErrorIs(t, err, backend.ErrInvalidName)

	// Inputs are checked before the driver is asked: the stand-in would
	// panic if it were (it implements none of that).
	u, err := backend.New(noInspect{})
	require.NoError(t, err)
	_, err = u.RevokeID(ctx, "r", "")
	assert.ErrorIs(t, err, backend.ErrInvalidOption)
	_, err = u.RevokeID(ctx, "", "1")
	assert.ErrorIs(t, err, backend.ErrInvalidName)
}
