package postgres

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/stderrcheck"
)

// pgx logs nothing without a tracer (ConnConfig.Tracer), and the adapter
// sets none: a Locker opened from a URL writes nothing to os.Stderr while
// its server is down and back, its pool and its listener reconnecting. The
// child process holds a lock and retries through a restart.
func TestClientLogsOffStderr(t *testing.T) {
	if stderrcheck.Child(t) {
		clientLogsChild(t)
		return
	}
	s := pgtest.Start(t)
	p := stderrcheck.Start(t, "PG_URL="+s.NewDatabase(t))
	p.WaitFor(t, "held", time.Minute)
	s.Stop()
	p.WaitFor(t, "failed", time.Minute)
	s.Restart(t)
	stdout, stderr := p.Wait(t, 2*time.Minute)
	require.Contains(t, stdout, "recovered")
	assert.Empty(t, stderr)
}

func clientLogsChild(t *testing.T) {
	ctx := context.Background()
	l, err := backend.Open(ctx, os.Getenv("PG_URL")+"&prefix=clientlog&ttl=4s&connect_timeout=1")
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Acquire(ctx, "a")
	require.NoError(t, err)
	stderrcheck.Mark("held")
	failed := false
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		b, err := l.TryAcquire(actx, "b")
		cancel()
		switch {
		case err == nil && failed:
			stderrcheck.Mark("recovered")
			require.NoError(t, b.Release(ctx))
			return
		case err == nil:
			require.NoError(t, b.Release(ctx))
		case !failed:
			failed = true
			stderrcheck.Mark("failed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the Locker did not recover")
}
