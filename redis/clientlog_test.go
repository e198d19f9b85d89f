package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/stderrcheck"
)

// A Locker opened from a URL keeps go-redis's lines about its client off
// os.Stderr while its server is down (the pool's failed dials), handing
// them to backend.WithLogger's logger if it was given one, and the
// application's own go-redis clients keep go-redis's default: their lines
// still reach os.Stderr, as before. The child process holds a lock and
// retries through a server crash; its own client dials a port where
// nothing listens.
func TestClientLogsOffStderr(t *testing.T) {
	if stderrcheck.Child(t) {
		clientLogsChild(t)
		return
	}
	s := redistest.Start(t)
	port, err := freeport.Port()
	require.NoError(t, err)
	userAddr := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	p := stderrcheck.Start(t, "LOCKER_ADDR="+s.Addr(), "USER_ADDR="+userAddr)
	p.WaitFor(t, "held", time.Minute)
	s.Kill()
	p.WaitFor(t, "failed", time.Minute)
	require.NoError(t, s.Restart())
	stdout, stderr := p.Wait(t, 2*time.Minute)
	t.Logf("child's stderr:\n%s", stderr)
	require.Contains(t, stdout, "recovered")
	assert.Contains(t, stderr, userAddr, "the application's client logs as go-redis does by default")
	assert.Regexp(t, `(?m)^redis: \d{4}/\d\d/\d\d \d\d:\d\d:\d\d \w+\.go:\d+: `, stderr, "go-redis's default format, file and line")
	assert.NotContains(t, stderr, s.Addr(), "no line about the Locker's client")
	assert.Regexp(t, `level=DEBUG msg=".*" via=WithLogger client=go-redis`, stdout, "backend.WithLogger got go-redis's lines")
}

func clientLogsChild(t *testing.T) {
	addr, userAddr := os.Getenv("LOCKER_ADDR"), os.Getenv("USER_ADDR")
	ctx := context.Background()
	l, err := backend.Open(ctx, "redis://"+addr+"?prefix=clientlog&ttl=2s&dial_timeout=300ms")
	require.NoError(t, err)
	defer l.Close()
	logged, err := backend.Open(ctx, "redis://"+addr+"?prefix=clientlog-logged&ttl=2s&dial_timeout=300ms", backend.WithLogger(stderrcheck.StdoutLogger().With("via", "WithLogger")))
	require.NoError(t, err)
	defer logged.Close()
	user := goredis.NewClient(&goredis.Options{Addr: userAddr, DialTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer user.Close()
	stderrcheck.HoldThroughOutage(t, func() { require.Error(t, user.Ping(ctx).Err()) }, l, logged)
}

// The logger this package installs sends a line to the clientLog of the
// client it is about (by the context or by the dial error), at debug level
// with client=go-redis, and every other line to os.Stderr as go-redis's
// default logger would.
func TestClientLoggerRoutes(t *testing.T) {
	var std, routed bytes.Buffer
	c := clientLogger{stderr: log.New(&std, "redis: ", 0)}
	to := &clientLog{l: slog.New(slog.NewTextHandler(&routed, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	c.Printf(withClientLog(context.Background(), to), "marked %d", 1)
	dialErr := &net.OpError{Op: "dial", Err: errors.New("refused")}
	ownedDials.add(dialErr, to)
	c.Printf(context.Background(), "failed to dial after %d attempts: %v", 5, dialErr)
	c.Printf(context.Background(), "failed to dial after %d attempts: %v", 5, &net.OpError{Op: "dial", Err: errors.New("refused")})
	c.Printf(withClientLog(context.Background(), &clientLog{}), "dropped")
	assert.Equal(t, "redis: failed to dial after 5 attempts: dial: refused\n", std.String())
	assert.Contains(t, routed.String(), `level=DEBUG msg="marked 1" client=go-redis`)
	assert.Contains(t, routed.String(), `level=DEBUG msg="failed to dial after 5 attempts: dial: refused" client=go-redis`)
	assert.Equal(t, 2, strings.Count(routed.String(), "\n"))
}
