package zookeeper

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/zktest"
)

// TestSuiteProfile: the zk scheme's declaration for the conformance suite
// is read from the session timeouts the server grants: the test server's
// (tickTime 200ms, maxSessionTimeout 120s), and a server with Debian's
// stock bounds (tickTime 2s: 4s to 40s), on which the suite's 2s TTL is
// not granted and its long leases must fit under 40s.
func TestSuiteProfile(t *testing.T) {
	probe := func(t *testing.T, addr string) driver.SuiteProfile {
		s, ok := driver.Lookup("zk")
		require.True(t, ok)
		require.NotNil(t, s.Suite)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := s.Suite(ctx, &url.URL{Scheme: "zk", Host: addr, Path: testPrefix(t)})
		require.NoError(t, err)
		return p
	}
	t.Run("TestServer", func(t *testing.T) {
		assert.Equal(t, driver.SuiteProfile{FIFO: true, TTL: suiteTTL, MinTTL: MinTTL, MaxTTL: zktest.MaxSessionTimeout, LockDelay: true},
			probe(t, srv.Addr()))
	})
	t.Run("Stock", func(t *testing.T) {
		stock := zktest.Start(t, zktest.WithStockTimeouts())
		assert.Equal(t, driver.SuiteProfile{FIFO: true, TTL: 4 * time.Second, MinTTL: 4 * time.Second, MaxTTL: 40 * time.Second, LockDelay: true},
			probe(t, stock.Addr()))
	})
}
