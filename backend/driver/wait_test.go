package driver_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend/driver"
)

// TestEndedWait: a wait that its context ended is a held lock only if the
// backend had queued it and has not stopped answering since.
func TestEndedWait(t *testing.T) {
	for _, tc := range []struct {
		queued, stopped bool
		want            error
	}{
		{true, false, driver.ErrNotAcquired},
		{true, true, driver.ErrUnavailable},
		{false, false, driver.ErrUnavailable},
		{false, true, driver.ErrUnavailable},
	} {
		require.Equal(t, tc.want, driver.EndedWait(tc.queued, tc.stopped), "queued %v, stopped %v", tc.queued, tc.stopped)
	}
}

// TestWaitError: what each driver reports of a wait that its context ended
// gives the error EndedWait decides, with the wait's error in the chain (or
// its text, for an attempt cut short), and a message naming the queue.
func TestWaitError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	noReply := errors.New("no reply before the context ended")
	// What a driver makes of an attempt cut short: unavailable, as any
	// request without an answer.
	cutShort := fmt.Errorf("%w: %w", driver.ErrUnavailable, context.Canceled)
	for _, tc := range []struct {
		name    string
		err     error
		w       driver.Wait
		want    error
		wantNot error
		msg     string
	}{
		// The backend's last word: queued behind a holder.
		{"QueuedAnswered", ctx.Err(), driver.Wait{Where: "etcd: queued", Queued: true},
			driver.ErrNotAcquired, driver.ErrUnavailable, "fencelock: lock not acquired: etcd: queued: context canceled"},
		// Queued, then the connection went down (etcd, ZooKeeper, mem).
		{"QueuedThenDisconnected", ctx.Err(), driver.Wait{Where: "etcd: queued", Queued: true, Stopped: "disconnected"},
			driver.ErrUnavailable, driver.ErrNotAcquired, "fencelock: backend unavailable: etcd: queued, then disconnected: context canceled"},
		// Queued, then an attempt cut short by ctx's end, which the driver
		// does not count as a failure: the last answer stands (the
		// attempt's ErrUnavailable is not in the chain).
		{"QueuedThenCutShort", cutShort, driver.Wait{Where: "redis: queued behind the holder", Queued: true, CutShort: true},
			driver.ErrNotAcquired, driver.ErrUnavailable,
			"fencelock: lock not acquired: redis: queued behind the holder (the last attempt, cut short: fencelock: backend unavailable: context canceled): context canceled"},
		// Queued, then an attempt that failed, then one cut short by ctx.
		{"QueuedFailedThenCutShort", noReply, driver.Wait{Where: "redis: queued behind the holder", Queued: true, Last: driver.ErrUnavailable, CutShort: true},
			driver.ErrUnavailable, driver.ErrNotAcquired,
			"fencelock: backend unavailable: redis: queued behind the holder, then an attempt failed: no reply before the context ended (last attempt: fencelock: backend unavailable)"},
		// Queued, then an attempt that failed, and ctx ended meanwhile.
		{"QueuedThenFailed", ctx.Err(), driver.Wait{Where: "postgres: queued behind the holder", Queued: true, Last: driver.ErrUnavailable},
			driver.ErrUnavailable, driver.ErrNotAcquired,
			"fencelock: backend unavailable: postgres: queued behind the holder, then an attempt failed: context canceled (last attempt: fencelock: backend unavailable)"},
		// Never queued: the attempt's own error.
		{"NotQueued", noReply, driver.Wait{Where: "redis: queued behind the holder", Last: noReply},
			noReply, driver.ErrNotAcquired, noReply.Error()},
		{"NotQueuedLastAttempt", ctx.Err(), driver.Wait{Where: "redis: queued behind the holder", Last: noReply},
			noReply, driver.ErrNotAcquired, "context canceled (last attempt: no reply before the context ended)"},
		{"NotQueuedDisconnected", ctx.Err(), driver.Wait{Where: "zookeeper: queued in /l", Stopped: "disconnected"},
			context.Canceled, driver.ErrNotAcquired, "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := driver.WaitError(ctx, tc.err, tc.w)
			require.ErrorIs(t, err, tc.want)
			require.NotErrorIs(t, err, tc.wantNot)
			require.EqualError(t, err, tc.msg)
			if tc.w.CutShort && tc.w.Last == nil {
				require.ErrorIs(t, err, ctx.Err()) // as a cancelled wait does
			} else {
				require.ErrorIs(t, err, tc.err)
			}
		})
	}
}

// TestWaitErrorKept: an error that ctx's end does not explain, or that
// says the lease is lost or the lock is held, is Lock's error as it is.
func TestWaitErrorKept(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	queued := driver.Wait{Where: "etcd: queued", Queued: true, Stopped: "disconnected"}
	refused := errors.New("refused")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
	}{
		{"NoError", ended, nil},
		{"ContextLive", context.Background(), refused},
		{"LeaseLost", ended, fmt.Errorf("%w: gone", driver.ErrDeleted)},
		{"Held", ended, fmt.Errorf("%w: held", driver.ErrNotAcquired)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.err, driver.WaitError(tc.ctx, tc.err, queued))
		})
	}
}
