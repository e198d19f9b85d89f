package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/election"
)

func memElector(t *testing.T, srv *mem.Server, opts ...election.Option) (*election.Elector, *backend.Locker) {
	t.Helper()
	l, err := mem.New(srv.Connect(), backend.WithTTL(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	e, err := election.New(l, opts...)
	require.NoError(t, err)
	return e, l
}

func TestNewRejectsBadOptions(t *testing.T) {
	_, err := election.New(nil)
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	_, l := memElector(t, mem.NewServer())
	_, err = election.New(l, election.WithPollInterval(0))
	require.ErrorIs(t, err, backend.ErrInvalidOption)
}

func TestBadInputFailsFast(t *testing.T) {
	e, _ := memElector(t, mem.NewServer())
	ctx := context.Background()
	_, err := e.Campaign(ctx, "", "v")
	require.ErrorIs(t, err, backend.ErrInvalidName)
	_, err = e.Campaign(ctx, "a", "bad\x00value")
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	_, err = e.Leader(ctx, "")
	require.ErrorIs(t, err, backend.ErrInvalidName)
	_, err = e.Observe(ctx, "")
	require.ErrorIs(t, err, backend.ErrInvalidName)
}

func TestLeaderProclaimResign(t *testing.T) {
	srv := mem.NewServer()
	e, _ := memElector(t, srv)
	ctx := context.Background()
	_, err := e.Leader(ctx, "job")
	require.ErrorIs(t, err, election.ErrNoLeader)

	term, err := e.Campaign(ctx, "job", "one")
	require.NoError(t, err)
	ld, err := e.Leader(ctx, "job")
	require.NoError(t, err)
	require.Equal(t, election.Leader{Name: "job", Token: term.Token(), Value: "one", ID: ld.ID}, ld)

	require.NoError(t, term.Proclaim(ctx, "two"))
	require.Equal(t, "two", term.Value())
	ld, err = e.Leader(ctx, "job")
	require.NoError(t, err)
	require.Equal(t, term.Token(), ld.Token, "Proclaim keeps the term")
	require.Equal(t, "two", ld.Value)

	require.NoError(t, term.Resign(ctx))
	require.ErrorIs(t, term.Err(), backend.ErrReleased)
	require.ErrorIs(t, term.Proclaim(ctx, "three"), backend.ErrReleased)
	_, err = e.Leader(ctx, "job")
	require.ErrorIs(t, err, election.ErrNoLeader)
}

func TestProclaimAfterLossStoresNothing(t *testing.T) {
	srv := mem.NewServer()
	e, _ := memElector(t, srv)
	ctx := context.Background()
	term, err := e.Campaign(ctx, "job", "one")
	require.NoError(t, err)
	require.True(t, srv.Revoke("job", term.Token()))
	<-term.Done()
	require.ErrorIs(t, term.Proclaim(ctx, "late"), backend.ErrLeaseLost)
	_, err = e.Leader(ctx, "job")
	require.ErrorIs(t, err, election.ErrNoLeader)
}

func TestCancelledCampaignLeavesNothing(t *testing.T) {
	srv := mem.NewServer()
	e, _ := memElector(t, srv)
	ctx := context.Background()
	term, err := e.Campaign(ctx, "job", "leader")
	require.NoError(t, err)
	defer term.Resign(ctx)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = e.Campaign(cctx, "job", "late")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 1, srv.Queued("job"), "the cancelled candidate left its entry behind")
}

// next reads the next observation, bounded.
func next(t *testing.T, ch <-chan election.Observation) election.Observation {
	t.Helper()
	select {
	case o, ok := <-ch:
		require.True(t, ok, "Observe closed its channel early")
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no observation within 10s")
		return election.Observation{}
	}
}

func TestObserveSeesTermsInOrder(t *testing.T) {
	srv := mem.NewServer()
	e, _ := memElector(t, srv, election.WithPollInterval(5*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := e.Observe(ctx, "job")
	require.NoError(t, err)
	require.Nil(t, next(t, ch).Leader)

	var last election.Leader
	for i, v := range []string{"a", "b", "c"} {
		term, err := e.Campaign(ctx, "job", v)
		require.NoError(t, err)
		o := next(t, ch)
		require.NoError(t, o.Err)
		require.NotNil(t, o.Leader, "term %d", i)
		require.Equal(t, v, o.Leader.Value)
		require.Equal(t, term.Token(), o.Leader.Token)
		require.Greater(t, o.Leader.Token, last.Token)
		last = *o.Leader
		require.NoError(t, term.Proclaim(ctx, v+"2"))
		o = next(t, ch)
		require.Equal(t, v+"2", o.Leader.Value)
		require.Equal(t, term.Token(), o.Leader.Token)
		require.NoError(t, term.Resign(ctx))
		require.Nil(t, next(t, ch).Leader, "no leader after the resign")
	}
	cancel()
	for range ch { // closed once ctx ends
	}
}

func TestObserveReportsUnknown(t *testing.T) {
	srv := mem.NewServer()
	conn := srv.Connect()
	l, err := mem.New(conn)
	require.NoError(t, err)
	defer l.Close()
	e, err := election.New(l, election.WithPollInterval(5*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := e.Observe(ctx, "job")
	require.NoError(t, err)
	require.Nil(t, next(t, ch).Leader)
	conn.Cut()
	o := next(t, ch)
	require.ErrorIs(t, o.Err, backend.ErrUnavailable)
	require.Nil(t, o.Leader)
	require.False(t, errors.Is(o.Err, election.ErrNoLeader), "unknown is not no leader")
	_, err = e.Leader(ctx, "job")
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.NotErrorIs(t, err, election.ErrNoLeader)
}

func TestObserveEndsWithTheLocker(t *testing.T) {
	srv := mem.NewServer()
	l, err := mem.New(srv.Connect())
	require.NoError(t, err)
	e, err := election.New(l, election.WithPollInterval(5*time.Millisecond))
	require.NoError(t, err)
	ch, err := e.Observe(context.Background(), "job")
	require.NoError(t, err)
	require.Nil(t, next(t, ch).Leader)
	require.NoError(t, l.Close())
	o := next(t, ch)
	require.ErrorIs(t, o.Err, backend.ErrClosed)
	select {
	case _, ok := <-ch:
		require.False(t, ok, "an observation after the Locker closed")
	case <-time.After(10 * time.Second):
		t.Fatal("Observe still running 10s after the Locker closed")
	}
}
