package zookeeper

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/zktest"
)

// The TTL a Locker advises can be passed to WithTTL as it is on a server
// with default settings (tickTime 2s: sessions of 4s to 40s): short holds
// are advised the 4s such a server grants at least, not a TTL under it that
// the server would raise and the first Acquire would reject.
func TestAdviseTTLOnStockServer(t *testing.T) {
	stock := zktest.Start(t, zktest.WithStockTimeouts())
	l := dialLocker(t, stock.Addr(), testPrefix(t), 2*zktest.StockTickTime)
	for _, hold := range []time.Duration{10 * time.Millisecond, 700 * time.Millisecond, 2 * time.Second, 5 * time.Second} {
		a := l.AdviseTTL(backend.HoldTimes{Count: 100, P999: hold, Max: hold}, 100*time.Millisecond)
		assert.GreaterOrEqual(t, a.TTL, 2*zktest.StockTickTime, "hold %v: %s", hold, a.Explanation)
		ls, err := l.TryAcquire(tctx(t, 10*time.Second), "advised", backend.WithTTL(a.TTL))
		require.NoError(t, err, "hold %v: the advised TTL %v is refused (%s)", hold, a.TTL, a.Explanation)
		assert.Equal(t, a.TTL, ls.TTL())
		release(t, ls)
	}
}
