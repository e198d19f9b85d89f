package redis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
)

// An acquire script that reaches the server at once but whose answer comes
// late (a slow return path, a client paused just after sending) takes the
// lock with an expiry counted from its arrival. Renewals due meanwhile must
// not move the local deadline past that expiry: there is nothing they can
// renew before the answer names the key. The deadline must come before the
// key's expiry as the server counts it.
func TestLateAnswerKeepsDeadlineBeforeExpiry(t *testing.T) {
	p, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	defer p.Close()
	prefix := testPrefix(t)
	pc := newClient(t, p.Addr())
	// A connection made now, so that the script is not held behind a
	// connection handshake, whose answers the proxy would hold too.
	require.NoError(t, pc.Ping(tctx(t, 5*time.Second)).Err())
	l, err := New(pc, Config{Prefix: prefix})
	require.NoError(t, err)
	defer l.Close()
	// And the scripts cached in the server: a NOSCRIPT answer held by the
	// proxy would delay the script itself.
	warm, err := l.TryAcquire(tctx(t, 5*time.Second), "warm")
	require.NoError(t, err)
	release(t, warm)
	// The answer is held for 2/3 of the TTL, past the renewal due at
	// TTL/3; a TTL of 3s leaves a loaded machine a second either side.
	const ttl = 3 * time.Second
	p.HoldReplies()
	healed := make(chan struct{})
	go func() {
		defer close(healed)
		time.Sleep(2 * ttl / 3)
		p.Heal()
	}()
	ls, err := l.TryAcquire(tctx(t, 10*time.Second), "late", backend.WithTTL(ttl))
	<-healed
	require.NoError(t, err)
	defer release(t, ls)

	// The server counted pttl when PTTL reached it, between before and
	// after: its expiry is between before+pttl and after+pttl (+1 ms, PTTL
	// rounds down). A renewal that moved the deadline would move it by
	// TTL/3 or more, far past either; the request's own delay on a
	// loaded machine (5 ms measured) must not count against the adapter.
	c := newClient(t, srv.Addr())
	before := time.Now()
	pttl, err := c.PTTL(tctx(t, 5*time.Second), keysOf(prefix, "late").lock).Result()
	after := time.Now()
	require.NoError(t, err)
	require.Positive(t, pttl, "the lock key has an expiry")
	latest := after.Add(pttl + time.Millisecond)
	t.Logf("local deadline %v before the key's expiry (PTTL answered in %v)", before.Add(pttl).Sub(ls.Deadline()), after.Sub(before))
	assert.True(t, ls.Deadline().Before(latest),
		"the local deadline is %v past the latest the key's expiry on the server can be", ls.Deadline().Sub(latest))
}
