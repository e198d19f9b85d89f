package zookeeper

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/stderrcheck"
	"github.com/fencelock/fencelock/internal/zktest"
)

// go-zookeeper's lines about a server that went away (failed connections,
// terminated loops) never reach os.Stderr: a Locker opened from a URL
// drops them, or hands them to backend.WithLogger's logger, and one
// dialled with backend.WithLogger to that logger, at debug level. The child process holds a lock on each and
// retries through a server restart.
func TestClientLogsOffStderr(t *testing.T) {
	if stderrcheck.Child(t) {
		clientLogsChild(t)
		return
	}
	t.Parallel() // a server of its own
	s := zktest.Start(t)
	p := stderrcheck.Start(t, "ZK_ADDR="+s.Addr())
	p.WaitFor(t, "held", time.Minute)
	s.Stop()
	p.WaitFor(t, "failed", time.Minute)
	require.NoError(t, s.Restart())
	stdout, stderr := p.Wait(t, 2*time.Minute)
	require.Contains(t, stdout, "recovered")
	assert.Empty(t, stderr)
	assert.Regexp(t, `level=DEBUG msg="[^"]*" client=go-zookeeper`, stdout, "Dial's WithLogger got go-zookeeper's lines")
	assert.Regexp(t, `level=DEBUG msg=".*" via=WithLogger client=go-zookeeper`, stdout, "backend.WithLogger got go-zookeeper's lines")
	assert.Equal(t, 1, strings.Count(stdout, "recovered"))
}

func clientLogsChild(t *testing.T) {
	addr := os.Getenv("ZK_ADDR")
	ctx := context.Background()
	byURL, err := backend.Open(ctx, "zk://"+addr+"/clientlog-url?ttl=4s")
	require.NoError(t, err)
	defer byURL.Close()
	dialled, err := Dial(ctx, Config{Servers: []string{addr}, Prefix: "/clientlog-dial", SessionTimeout: 4 * time.Second},
		backend.WithLogger(stderrcheck.StdoutLogger()))
	require.NoError(t, err)
	defer dialled.Close()
	logged, err := backend.Open(ctx, "zk://"+addr+"/clientlog-logged?ttl=4s", backend.WithLogger(stderrcheck.StdoutLogger().With("via", "WithLogger")))
	require.NoError(t, err)
	defer logged.Close()
	stderrcheck.HoldThroughOutage(t, nil, byURL, dialled, logged)
}
