package etcd

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/stderrcheck"
)

// A Locker opened from a URL writes nothing to os.Stderr while its cluster
// is down and back: neither clientv3's zap logger (the adapter gives it
// zap.NewNop) nor gRPC's (silent below ERROR unless
// GRPC_GO_LOG_SEVERITY_LEVEL says otherwise). A Locker over the
// application's client logs through that client's logger, here a zap
// logger on os.Stdout, which shows the outage made clientv3 log; one opened
// from a URL with backend.WithLogger gets clientv3's lines there. The
// child process holds a lock on each and retries through a restart.
func TestClientLogsOffStderr(t *testing.T) {
	if stderrcheck.Child(t) {
		clientLogsChild(t)
		return
	}
	s := etcdtest.Start(t)
	p := stderrcheck.Start(t, "ETCD_ADDR="+strings.TrimPrefix(s.Endpoints()[0], "http://"))
	p.WaitFor(t, "held", time.Minute)
	s.Stop()
	p.WaitFor(t, "failed", time.Minute)
	require.NoError(t, s.Restart())
	stdout, stderr := p.Wait(t, 2*time.Minute)
	require.Contains(t, stdout, "recovered")
	assert.Empty(t, stderr)
	assert.Contains(t, stdout, `{"level":"warn"`, "the application's client logged through its own logger")
	assert.Regexp(t, `level=DEBUG msg=".*" via=WithLogger client=etcd zap_level=warn`, stdout, "backend.WithLogger got clientv3's lines")
}

func clientLogsChild(t *testing.T) {
	addr := os.Getenv("ETCD_ADDR")
	ctx := context.Background()
	byURL, err := backend.Open(ctx, "etcd://"+addr+"/clientlog-url?ttl=4s&dial_timeout=5s")
	require.NoError(t, err)
	defer byURL.Close()
	cfg := zap.NewProductionConfig()
	cfg.OutputPaths, cfg.ErrorOutputPaths = []string{"stdout"}, []string{"stdout"}
	lg, err := cfg.Build()
	require.NoError(t, err)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, DialTimeout: 5 * time.Second, Logger: lg}) // 5s: the dial waits for a server a busy machine may answer slowly
	require.NoError(t, err)
	defer c.Close()
	users, err := New(c, Config{Prefix: "clientlog-user"})
	require.NoError(t, err)
	defer users.Close()
	logged, err := backend.Open(ctx, "etcd://"+addr+"/clientlog-logged?ttl=4s&dial_timeout=5s", backend.WithLogger(stderrcheck.StdoutLogger().With("via", "WithLogger")))
	require.NoError(t, err)
	defer logged.Close()
	stderrcheck.HoldThroughOutage(t, nil, byURL, users, logged)
}
