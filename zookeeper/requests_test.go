package zookeeper

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/lockbench"
)

// TestContendedRequestsPerGrant counts at the server what one grant costs
// when 8 contenders take turns with zero-length holds: with fencelock, 7
// requests (the release's delete, the create (a plain one: every
// acquisition here follows one that waited), one getChildren, watches on
// the predecessor, the node ahead of it and our own node, and one
// getChildren while the predecessor holds) and 3 watch events (to the
// successor, to the waiter behind it, and to the releaser's own watch);
// zk.Lock's 5 and 1 are logged beside. It fails if a change adds a request
// or an event per grant. The ceilings leave room for the few extra
// requests the first turns make.
func TestContendedRequestsPerGrant(t *testing.T) {
	const contenders, grants = 8, 1000
	for _, impl := range impls {
		prefix := testPrefix(t)
		cs := make([]lockbench.Contender, contenders)
		for i := range cs {
			cs[i].Lock, cs[i].Unlock = impl.new(t, prefix, "contended")
		}
		count := packetCounter(t)
		r, err := lockbench.RunContended(tctx(t, 2*time.Minute), cs, grants, nil)
		require.NoError(t, err)
		requests, events := count(r.Grants)
		t.Logf("%s: %.2f requests and %.2f watch events per grant", impl.name, requests, events)
		if impl.name == "fencelock" {
			assert.LessOrEqual(t, requests, 7.5, "requests per grant")
			assert.LessOrEqual(t, events, 3.5, "watch events per grant")
		}
	}
}

// packetCounter reads the server's packet counters (mntr) now; the function
// it returns reads them again and gives the requests and the watch events
// per grant in between. Every request gets one reply, so what the server
// sent beyond its replies were events.
func packetCounter(tb testing.TB) func(grants int) (requests, events float64) {
	tb.Helper()
	before, err := srv.Monitor()
	require.NoError(tb, err)
	return func(grants int) (float64, float64) {
		after, err := srv.Monitor()
		require.NoError(tb, err)
		received := after["zk_packets_received"] - before["zk_packets_received"]
		sent := after["zk_packets_sent"] - before["zk_packets_sent"]
		return float64(received) / float64(grants), float64(sent-received) / float64(grants)
	}
}
