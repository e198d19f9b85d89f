package lockwait

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

func TestError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	noReply := errors.New("no reply before the context ended")
	// What an adapter makes of an attempt cut short: unavailable, as any
	// request without an answer.
	cutShort := fmt.Errorf("%w: %w", backend.ErrUnavailable, context.Canceled)
	for _, tc := range []struct {
		name    string
		err     error
		queued  bool
		failing error
		want    error
		wantNot error
	}{
		// The server's last word: queued behind a holder.
		{"QueuedAnswered", ctx.Err(), true, nil, backend.ErrNotAcquired, backend.ErrUnavailable},
		// Queued, then an attempt cut short by ctx's end, which the
		// adapter does not count as a failure: the last answer stands
		// (the attempt's ErrUnavailable is not in the chain).
		{"QueuedThenCutShort", cutShort, true, nil, backend.ErrNotAcquired, backend.ErrUnavailable},
		// Queued, then an attempt that failed, then one cut short by ctx.
		{"QueuedFailedThenCutShort", noReply, true, backend.ErrUnavailable, backend.ErrUnavailable, backend.ErrNotAcquired},
		// Queued, then an attempt that failed, and ctx ended meanwhile.
		{"QueuedThenFailed", ctx.Err(), true, backend.ErrUnavailable, backend.ErrUnavailable, backend.ErrNotAcquired},
		// Never queued: the attempt's own error.
		{"NotQueued", noReply, false, noReply, noReply, backend.ErrNotAcquired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Error(ctx, tc.err, "test", func() (bool, error) { return tc.queued, tc.failing })
			require.ErrorIs(t, err, tc.want)
			require.NotErrorIs(t, err, tc.wantNot)
			require.ErrorContains(t, err, tc.err.Error())
			if tc.err == cutShort {
				require.ErrorIs(t, err, ctx.Err()) // as a cancelled wait does
			} else {
				require.ErrorIs(t, err, tc.err)
			}
		})
	}
}
