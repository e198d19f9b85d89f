package redis

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
)

// TestClientClosed: a client closed by its owner under the Locker
// (go-redis's ErrClosed) is backend.ErrClientClosed on every call, and the
// lease held then is lost at its next renewal.
func TestClientClosed(t *testing.T) {
	prefix := testPrefix(t)
	other := locker(t, srv.Addr(), Config{Prefix: prefix})
	locktest.ClientClosed(t, other, 6*time.Second, func(t *testing.T) (*backend.Locker, func()) {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		l, err := New(c, Config{Prefix: prefix})
		require.NoError(t, err)
		return l, func() { _ = c.Close() }
	})
}
