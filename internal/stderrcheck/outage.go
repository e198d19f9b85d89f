package stderrcheck

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// HoldThroughOutage is the child's side of an outage test: each of lockers
// holds the lock "a" (then it marks "held"), and every 50ms takes and
// releases "b", until a round fails (it calls onFailed, if not nil, and
// marks "failed") and a later round succeeds on every Locker (it marks
// "recovered" and returns). A release may find the server killed between
// its grant and itself: that round fails, as the next attempt would. It
// fails t if the Lockers do not recover within 90s.
func HoldThroughOutage(t *testing.T, onFailed func(), lockers ...*backend.Locker) {
	t.Helper()
	ctx := context.Background()
	for _, l := range lockers {
		_, err := l.Acquire(ctx, "a")
		require.NoError(t, err)
	}
	Mark("held")
	failed := false
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ok := true
		for _, l := range lockers {
			// 5s, not less: a round that a busy machine makes slow would
			// be taken for the outage before the server was stopped.
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			b, err := l.TryAcquire(actx, "b")
			cancel()
			if err == nil {
				// Bounded too: a server stopped between the grant and
				// the release would hold a Release without a deadline
				// until it is back, and the parent restarts it only
				// after "failed" (seen: the parent waited its minute).
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err = b.Release(rctx)
				cancel()
				if err != nil {
					require.ErrorIs(t, err, backend.ErrUnavailable)
				}
			}
			ok = ok && err == nil
		}
		switch {
		case ok && failed:
			Mark("recovered")
			return
		case !ok && !failed:
			failed = true
			if onFailed != nil {
				onFailed()
			}
			Mark("failed")
		}
	}
	t.Fatal("the Lockers did not recover")
}

// StdoutLogger is a debug-level text logger on the child's standard
// output, which the parent reads back (Proc.Wait).
func StdoutLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
