package etcd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
)

// TestClientClosed: a client closed by its owner under the Locker (gRPC
// fails every call with Canceled then) is backend.ErrClientClosed on
// every call, and the lease held then is lost at its next renewal.
func TestClientClosed(t *testing.T) {
	prefix := testPrefix(t)
	locktest.ClientClosed(t, locker(t, prefix), 6*time.Second, func(t *testing.T) (*backend.Locker, func()) {
		c, err := srv.Client()
		require.NoError(t, err)
		l, err := New(c, Config{Prefix: prefix})
		require.NoError(t, err)
		return l, func() { _ = c.Close() }
	})
}
