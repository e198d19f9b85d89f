package zookeeper

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// TestClientClosed: a Conn closed by its owner under the Locker (which
// go-zookeeper fails as it fails a connection that is only down) is
// backend.ErrClientClosed on every call, and the lease held then is lost
// at once (closing the Conn closed the session).
func TestClientClosed(t *testing.T) {
	prefix := testPrefix(t)
	const ttl = 6 * time.Second
	other := dialLocker(t, srv.Addr(), prefix, ttl)
	locktest.ClientClosed(t, other, ttl, func(t *testing.T) (*backend.Locker, func()) {
		c := zktest.ConnectTo(t, srv.Addr(), ttl)
		l, err := New(c, Config{Prefix: prefix})
		require.NoError(t, err)
		return l, c.Close
	})
}
