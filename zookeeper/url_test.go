package zookeeper

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// silentListener accepts connections and never answers; closed at cleanup.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// closedPort returns a 127.0.0.1 address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// openErr opens rawURL with ctx and returns Open's error and how long it
// took; a Locker that opened is closed and fails the test.
func openErr(t *testing.T, ctx context.Context, rawURL string) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	l, err := backend.Open(ctx, rawURL)
	took := time.Since(start)
	if err == nil {
		_ = l.Close()
		t.Fatalf("%s opened", rawURL)
	}
	t.Logf("%s: after %v: %v", rawURL, took, err)
	return err, took
}

// Without a context deadline, dial_timeout bounds Open: a closed port and a
// server that accepts and never answers.
func TestOpenDialTimeout(t *testing.T) {
	for name, addr := range map[string]string{"closed port": closedPort(t), "silent server": silentListener(t)} {
		t.Run(name, func(t *testing.T) {
			err, took := openErr(t, context.Background(), "zk://"+addr+"/x?dial_timeout=1s")
			require.ErrorIs(t, err, backend.ErrUnavailable)
			assert.NotErrorIs(t, err, backend.ErrInvalidURL)
			assert.ErrorContains(t, err, "within dial_timeout 1s")
			assert.Less(t, took, 3*time.Second)
			if name == "silent server" {
				assert.ErrorContains(t, err, "accepted the connection but did not answer")
			} else {
				assert.ErrorContains(t, err, "connection refused")
			}
		})
	}
}
