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
	l, err := backend.Open(ctx, os.Getenv("PG_URL")+"&prefix=clientlog&ttl=4s&connect_timeout=5")
	require.NoError(t, err)
	defer l.Close()
	stderrcheck.HoldThroughOutage(t, nil, l)
}
