package backend_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
)

func TestNewRejectsBadDefaults(t *testing.T) {
	conn := mem.NewServer().Connect()
	_, err := mem.New(conn, backend.WithTTL(0))
	assert.ErrorIs(t, err, backend.ErrInvalidOption)
	_, err = mem.New(conn, backend.WithTTL(time.Second), backend.WithDriftMargin(-time.Millisecond))
	assert.ErrorIs(t, err, backend.ErrInvalidOption)
}

// The deadline is send time + TTL - margin, where the default margin is 1% of
// TTL plus 5ms, never more than TTL/10.
func TestDeadlineWithinTTLOfSend(t *testing.T) {
	ctx := context.Background()
	l, err := mem.New(mem.NewServer().Connect())
	require.NoError(t, err)
	defer l.Close()
	for _, ttl := range []time.Duration{200 * time.Millisecond, time.Second, time.Minute} {
		before := time.Now()
		lease, err := l.Acquire(ctx, "d", backend.WithTTL(ttl))
		require.NoError(t, err)
		after := time.Now()
		margin := min(ttl/100+5*time.Millisecond, ttl/10)
		assert.False(t, lease.Deadline().Before(before.Add(ttl-margin)), "deadline earlier than send + TTL - margin")
		assert.False(t, lease.Deadline().After(after.Add(ttl-margin)), "deadline later than send + TTL - margin")
		assert.True(t, lease.Deadline().After(after), "deadline already passed")
		require.NoError(t, lease.Release(ctx))
	}
}

func TestMetadataOptionDoesNotAlias(t *testing.T) {
	conn := mem.NewServer().Connect()
	base := map[string]string{"a": "1"}
	l, err := mem.New(conn, backend.WithMetadata(base))
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Acquire(context.Background(), "m", backend.WithMetadata(map[string]string{"b": "2"}))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1"}, base, "a per-acquire option changed the caller's map")
}

// WithHolder refuses what the URL's holder refuses, with the same check:
// an empty identity, or one that is not printable UTF-8, in New and in an
// Acquire (where it succeeded).
func TestWithHolderRejectsWhatTheURLRejects(t *testing.T) {
	conn := mem.NewServer().Connect()
	for _, id := range []string{"", "a\nb", "a\tb", "a\x00b", "\xff"} {
		_, err := mem.New(conn, backend.WithHolder(id))
		assert.ErrorIs(t, err, backend.ErrInvalidOption, "New, holder %q", id)
		assert.ErrorContains(t, err, "the holder is", "holder %q", id)

		l, err := mem.New(conn)
		require.NoError(t, err)
		_, err = l.Acquire(context.Background(), "h", backend.WithHolder(id))
		assert.ErrorIs(t, err, backend.ErrInvalidOption, "Acquire, holder %q", id)
		require.NoError(t, l.Close())
	}
	// A later WithHolder replaces a refused one, as it replaces any.
	l, err := mem.New(conn, backend.WithHolder(""), backend.WithHolder("ok:1"))
	require.NoError(t, err)
	ls, err := l.Acquire(context.Background(), "h")
	require.NoError(t, err)
	assert.Equal(t, "ok:1", ls.Holder())
	require.NoError(t, l.Close())
}

// New with a nil driver is an error, not a panic.
func TestNewNilDriver(t *testing.T) {
	var l *backend.Locker
	var err error
	assert.NotPanics(t, func() { l, err = backend.New(nil) })
	assert.Nil(t, l)
	assert.ErrorIs(t, err, backend.ErrInvalidOption)
}

// A lease whose renewals the max hold stopped, lost then by the backend's
// word (its expiry seen before the local deadline's timer fired, as on a
// busy machine; here an operator's revoke in that last TTL), names the max
// hold as the cause, the backend's error kept (the conformance suite's
// MaxHold case failed so on etcd under load: "lock key … was deleted").
func TestMaxHoldNamedWhenTheBackendEndsTheLastTTL(t *testing.T) {
	srv := mem.NewServer()
	l, err := mem.New(srv.Connect())
	require.NoError(t, err)
	defer l.Close()
	ctx := context.Background()
	ls, err := l.Acquire(ctx, "m", backend.WithTTL(time.Minute), backend.WithMaxHold(time.Millisecond))
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // past the max hold: renewals stopped
	require.True(t, srv.Revoke("m", ls.Token()))
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked lease was not reported lost")
	}
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
	require.ErrorIs(t, ls.Err(), backend.ErrMaxHold)
	require.ErrorContains(t, ls.Err(), "revoked")

	// Without a max hold, the same revoke is the backend's alone.
	ls, err = l.Acquire(ctx, "m", backend.WithTTL(time.Minute))
	require.NoError(t, err)
	require.True(t, srv.Revoke("m", ls.Token()))
	<-ls.Done()
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
	require.NotErrorIs(t, ls.Err(), backend.ErrMaxHold)
}

// WithLockDelay must not be negative, in New, in Open's URL and in an
// Acquire; 0 is allowed (off), and a driver that cannot enforce a
// lock-delay refuses a positive one before anything is sent.
func TestLockDelayValidated(t *testing.T) {
	conn := mem.NewServer().Connect()
	_, err := mem.New(conn, backend.WithLockDelay(-time.Millisecond))
	assert.ErrorIs(t, err, backend.ErrInvalidOption)
	l, err := mem.New(conn, backend.WithLockDelay(0))
	require.NoError(t, err)
	defer l.Close()
	_, err = l.TryAcquire(context.Background(), "d", backend.WithLockDelay(-time.Second))
	assert.ErrorIs(t, err, backend.ErrInvalidOption)

	u, err := backend.Open(context.Background(), "mem://lockdelay?lock_delay=1500ms")
	require.NoError(t, err)
	defer u.Close()
	ls, err := u.TryAcquire(context.Background(), "d")
	require.NoError(t, err)
	require.NoError(t, ls.Release(context.Background()))
}

// A driver whose Capabilities do not declare LockDelay refuses a
// positive lock-delay, as a default and in an acquisition.
func TestLockDelayRefusedWithoutCapability(t *testing.T) {
	_, err := backend.New(newStuckDriver(), backend.WithLockDelay(time.Second))
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	require.ErrorContains(t, err, "cannot enforce a lock-delay")
	l, err := backend.New(newStuckDriver(), backend.WithLockDelay(0))
	require.NoError(t, err)
	defer l.Close()
	_, err = l.TryAcquire(context.Background(), "d", backend.WithLockDelay(time.Second))
	require.ErrorIs(t, err, backend.ErrInvalidOption)
}
