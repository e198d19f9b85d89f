package redis

import (
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// clusterURL is the redis+cluster URL of c's nodes.
func clusterURL(c *redistest.Cluster, query string) string {
	return "redis+cluster://" + strings.Join(c.Addrs(), ",") + "?" + query
}

// sentinelURL is the redis+sentinel URL of s's Sentinels.
func sentinelURL(s *redistest.Sentinels, query string) string {
	return "redis+sentinel://" + strings.Join(s.Addrs(), ",") + "/0?master_name=" + redistest.SentinelMaster + "&" + query
}

// TestClusterLocks runs the tests of many locks and their wake-ups on one
// Redis Cluster of 3 masters with a replica each.
func TestClusterLocks(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1)
	t.Run("Spread", func(t *testing.T) { testClusterSpread(t, c) })
	t.Run("LocalWake", func(t *testing.T) { testClusterLocalWake(t, c) })
}

// Through a redis+cluster URL, the locks of 1,000 names spread over every
// master, each master within a quarter of an even share; every key of a
// name (lock, token counter, queue, queue expiries, an end mark, an
// election candidate's value key) is in one slot (CLUSTER KEYSLOT, the
// server's own hash), names with characters the hash tag escapes
// included; and while all are held, each lock's key and counter are on
// the master that serves that slot. The go-redis addr= form names the
// same cluster.
func testClusterSpread(t *testing.T, c *redistest.Cluster) {
	const names = 1000
	ctx := tctx(t, time.Minute)
	addrs := c.Addrs()
	u := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "," + addrs[2] + "&prefix=spread"
	l, err := backend.Open(ctx, u)
	require.NoError(t, err)
	defer l.Close()

	name := func(i int) string {
		if i%10 == 0 {
			return fmt.Sprintf("job:{%d}%%", i) // escaped in the hash tag
		}
		return fmt.Sprint("job-", i)
	}
	leases := make([]*backend.Lease, names)
	for i := range leases {
		leases[i], err = l.TryAcquire(ctx, name(i))
		require.NoError(t, err)
	}
	owners, err := c.SlotMasters(ctx)
	require.NoError(t, err)
	slots := c.Masters[0].NewClient(t).Pipeline()
	keySlots := make([][]*goredis.IntCmd, names)
	for i := range keySlots {
		k := keysOf("spread", name(i))
		for _, key := range []string{k.lock, k.counter, k.queue, k.expiry, k.ended + "0123abcd.1.2000", valueKey(k.lock, "0123abcd.2.v.2000")} {
			keySlots[i] = append(keySlots[i], slots.ClusterKeySlot(ctx, key))
		}
	}
	_, err = slots.Exec(ctx)
	require.NoError(t, err)
	exists := map[string]goredis.Pipeliner{}
	for _, m := range c.Masters {
		exists[m.Addr()] = m.NewClient(t).Pipeline()
	}
	perMaster := map[string]int{}
	held := make([]*goredis.IntCmd, names)
	for i, cmds := range keySlots {
		slot := cmds[0].Val()
		for _, cmd := range cmds[1:] {
			require.Equal(t, slot, cmd.Val(), "the keys of %q are in one slot", name(i))
		}
		owner := owners[slot]
		require.Contains(t, exists, owner, "slot %d's master", slot)
		perMaster[owner]++
		k := keysOf("spread", name(i))
		held[i] = exists[owner].Exists(ctx, k.lock, k.counter)
	}
	for _, p := range exists {
		_, err := p.Exec(ctx)
		require.NoError(t, err)
	}
	for i, cmd := range held {
		require.EqualValues(t, 2, cmd.Val(), "the lock key and counter of %q are on the master of their slot", name(i))
	}
	for _, ls := range leases {
		release(t, ls)
	}
	t.Logf("%d names per master: %v", names, perMaster)
	require.Len(t, perMaster, 3, "%d names on all three masters", names)
	for m, n := range perMaster {
		assert.InDelta(t, names/3, n, names/3/4, "master %s's share", m)
	}
}

// A forced failover of the master that holds a lock (CLUSTER FAILOVER
// TAKEOVER on its replica): the holder's lease goes on (the key was
// replicated), a later grant's token is larger, and a stale lease's
// release leaves the new holder alone.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1)
	ctx := tctx(t, time.Minute)
	u := clusterURL(c, "prefix=fo&ttl=3s")
	a, err := backend.Open(ctx, u)
	require.NoError(t, err)
	defer a.Close()
	b, err := backend.Open(ctx, u)
	require.NoError(t, err)
	defer b.Close()
	// A grant that waits for a replica goes to the master of its slot
	// in one pipeline, which does not follow redirections.
	w, err := backend.Open(ctx, u+"&wait_replicas=1&wait_timeout=1s")
	require.NoError(t, err)
	defer w.Close()
	lw, err := w.TryAcquire(ctx, "x")
	require.NoError(t, err)
	release(t, lw)

	la, err := a.TryAcquire(ctx, "x")
	require.NoError(t, err)
	m, err := c.MasterOf(ctx, keysOf("fo", "x").lock)
	require.NoError(t, err)
	r, err := c.ReplicaOf(ctx, m)
	require.NoError(t, err)
	require.NoError(t, redistest.WaitReplicated(ctx, m, r))
	require.NoError(t, c.Failover(ctx, r, true))

	// The holder keeps renewing on the promoted replica.
	time.Sleep(2 * 3 * time.Second)
	require.NoError(t, la.Err(), "the holder's lease after the failover")
	_, err = b.TryAcquire(ctx, "x")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	release(t, la)
	lb, err := b.TryAcquire(ctx, "x")
	require.NoError(t, err)
	assert.Greater(t, lb.Token(), la.Token())
	release(t, lb)

	// The replica-waiting grant on the moved slot: its pipeline meets
	// MOVED at the old master, and is sent again to the new one at once.
	// (Were it to fail, the error must be ErrUnavailable, never a raw
	// MOVED.)
	var tries int
	require.Eventually(t, func() bool {
		tries++
		lw, err = w.TryAcquire(ctx, "x")
		if err != nil {
			require.ErrorIs(t, err, backend.ErrUnavailable)
			return false
		}
		return true
	}, 30*time.Second, 50*time.Millisecond)
	assert.Greater(t, lw.Token(), la.Token())
	assert.Equal(t, 1, tries, "the replica-waiting grant after the failover")
	release(t, lw)
}

// SENTINEL FAILOVER while a lock is held: a Locker opened from a
// redis+sentinel URL follows the new primary; a grant after the failover
// has a larger token.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinels(t, 3)
	ctx := tctx(t, time.Minute)
	u := sentinelURL(s, "prefix=fo&ttl=3s")
	a, err := backend.Open(ctx, u)
	require.NoError(t, err)
	defer a.Close()
	la, err := a.TryAcquire(ctx, "x")
	require.NoError(t, err)
	require.NoError(t, redistest.WaitReplicated(ctx, s.Primary, s.Replica))
	_, err = s.Failover(ctx)
	require.NoError(t, err)
	release(t, la) // on the new primary, or ErrLeaseLost if the key was lost: both harmless
	var lb *backend.Lease
	require.Eventually(t, func() bool {
		lb, err = a.TryAcquire(ctx, "x")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "a grant on the promoted primary: %v", err)
	assert.Greater(t, lb.Token(), la.Token())
	release(t, lb)
}

// Nodes lists every address a Locker of the URL may dial: the URL's hosts
// and what the servers announce.
func TestNodes(t *testing.T) {
	t.Parallel()
	ctx := tctx(t, time.Minute)
	c := redistest.StartCluster(t, 3, 1)
	got, err := Nodes(ctx, "redis+cluster://"+c.Addrs()[0])
	require.NoError(t, err)
	assert.ElementsMatch(t, c.Addrs(), got)

	s := redistest.StartSentinels(t, 3)
	got, err = Nodes(ctx, sentinelURL(s, ""))
	require.NoError(t, err)
	assert.ElementsMatch(t, append(s.Addrs(), s.Primary.Addr(), s.Replica.Addr()), got)

	got, err = Nodes(ctx, "redis://127.0.0.1:1")
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:1"}, got, "a single server's URL: its host, undialled")
	_, err = Nodes(ctx, "redis+sentinel://127.0.0.1:1?master_name=m&dial_timeout=1s")
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	_, err = Nodes(ctx, "redis+sentinel://127.0.0.1:1")
	assert.ErrorIs(t, err, backend.ErrInvalidURL)
}

// rediss+cluster: every node over TLS (the cluster bus and replication
// too), each verified for its own announced address against cacert, with
// a client certificate: names on every master are granted, and the
// replica-waiting grant works.
func TestClusterTLS(t *testing.T) {
	t.Parallel()
	f := tlstest.New(t)
	c := redistest.StartCluster(t, 3, 1, redistest.WithTLS(f))
	ctx := tctx(t, time.Minute)
	q := url.Values{"cacert": {f.CA}, "cert": {f.ClientCert}, "key": {f.ClientKey}, "prefix": {"tls"}}
	u := "rediss+cluster://" + strings.Join(c.Addrs(), ",") + "?" + q.Encode()
	for _, raw := range []string{u, u + "&wait_replicas=1"} {
		l, err := backend.Open(ctx, raw)
		require.NoError(t, err)
		masters := map[string]bool{}
		for i := range 30 {
			name := fmt.Sprint("tls-", i)
			ls, err := l.TryAcquire(ctx, name)
			require.NoError(t, err)
			m, err := c.MasterOf(ctx, keysOf("tls", name).lock)
			require.NoError(t, err)
			masters[m.Addr()] = true
			release(t, ls)
		}
		assert.Len(t, masters, 3)
		require.NoError(t, l.Close())
	}
	nodes, err := Nodes(ctx, u)
	require.NoError(t, err)
	assert.ElementsMatch(t, c.Addrs(), nodes)

	// A plain URL at the TLS nodes is refused at Open, saying TLS.
	_, err = backend.Open(ctx, "redis+cluster://"+strings.Join(c.Addrs(), ",")+"?dial_timeout=2s")
	require.ErrorIs(t, err, backend.ErrUnavailable)
	assert.Contains(t, err.Error(), "TLS")
}

// rediss+sentinel: the Sentinels and the servers over TLS only, with a
// client certificate: the Locker finds the primary, and follows a failover.
func TestSentinelTLS(t *testing.T) {
	t.Parallel()
	f := tlstest.New(t)
	s := redistest.StartSentinels(t, 3, redistest.WithTLS(f))
	ctx := tctx(t, time.Minute)
	q := url.Values{"cacert": {f.CA}, "cert": {f.ClientCert}, "key": {f.ClientKey}, "prefix": {"tls"}, "master_name": {redistest.SentinelMaster}}
	l, err := backend.Open(ctx, "rediss+sentinel://"+strings.Join(s.Addrs(), ",")+"/0?"+q.Encode())
	require.NoError(t, err)
	defer l.Close()
	la, err := l.TryAcquire(ctx, "x")
	require.NoError(t, err)
	release(t, la)
	_, err = s.Failover(ctx)
	require.NoError(t, err)
	// Until Sentinel makes the old primary the new one's replica (8s at
	// least after the failover) it is still a master, and a client that
	// has not heard +switch-master yet can be granted the lock there, which
	// the resync then drops: under scripts/test --under-load the release
	// found the key gone (the loss, correctly reported). The test is about
	// the promoted primary: it waits for the deployment to settle.
	servers := append([]*redistest.Server{s.Primary, s.Replica}, s.More...)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := redistest.Settled(ctx, s.Sentinels, servers)
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "the old primary a replica of the new one: %v", err)
	}
	var lb *backend.Lease
	require.Eventually(t, func() bool {
		lb, err = l.TryAcquire(ctx, "x")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "a grant on the promoted primary over TLS: %v", err)
	assert.Greater(t, lb.Token(), la.Token())
	release(t, lb)
}

// On a cluster, a waiting Locker subscribes to its wake channel on every
// master (its own subscription on the master of the channel's slot, a
// local one on each other: see hub), so the release of a lock whose
// master is another one reaches it from that master, not over the
// cluster bus alone; the grant's copies wake it once; and closing the
// Locker leaves no subscription behind.
func testClusterLocalWake(t *testing.T, c *redistest.Cluster) {
	ctx := tctx(t, time.Minute)
	prefix := testPrefix(t)
	la, _ := driverLocker(t, c.NewClient(t), Config{Prefix: prefix})
	cb := c.NewClient(t)
	db, err := newDriver(cb, Config{Prefix: prefix}, nil)
	require.NoError(t, err)
	lb, err := backend.New(db, backend.WithTTL(30*time.Second))
	require.NoError(t, err)
	defer lb.Close()

	channel := wakeChannel(prefix, db.id)
	own, err := cb.MasterForKey(ctx, channel)
	require.NoError(t, err)
	var name string
	for i := 0; name == ""; i++ {
		m, err := cb.MasterForKey(ctx, keysOf(prefix, fmt.Sprint("n", i)).lock)
		require.NoError(t, err)
		if m.Options().Addr != own.Options().Addr {
			name = fmt.Sprint("n", i)
		}
	}
	held, err := la.TryAcquire(ctx, name, backend.WithTTL(30*time.Second))
	require.NoError(t, err)
	ch := goAcquire(ctx, lb, name)
	require.Eventually(t, func() bool { return waiters(t, la, name) == 1 }, 10*time.Second, 5*time.Millisecond)
	numsub := func(m *redistest.Server) int64 {
		n, err := m.NewClient(t).PubSubNumSub(ctx, channel).Result()
		require.NoError(t, err)
		return n[channel]
	}
	for _, m := range c.Masters {
		require.Eventually(t, func() bool { return numsub(m) == 1 }, 10*time.Second, 5*time.Millisecond,
			"one subscriber of the waiter's channel on %s", m.Addr())
	}

	release(t, held)
	r := waitAcquired(t, ch, 15*time.Second)
	require.NoError(t, r.Err)
	require.Greater(t, r.Lease.Token(), held.Token())
	require.Eventually(t, func() bool { return db.hub.localMsgs.Load() >= 1 }, 10*time.Second, 5*time.Millisecond,
		"the lock's master delivered the grant on the local subscription")
	require.EqualValues(t, 1, db.wakeups.Load(), "the grant woke the waiter once")
	release(t, r.Lease)

	require.NoError(t, lb.Close())
	for _, m := range c.Masters {
		require.Zero(t, numsub(m), "no subscription left on %s", m.Addr())
	}
}

// A grant's copies (one per master the Locker subscribes on) wake its
// waiter once; "try again" messages wake it each time.
func TestHubDeliverOnce(t *testing.T) {
	var wakeups atomic.Int64
	h := newHub(newClient(t, srv.Addr()), "ch", &wakeups)
	w := &sub{h: h, owner: "id.1.2000", notify: make(chan struct{}, 1)}
	h.waiters[w.owner] = w
	h.deliver("id.1.2000:42")
	h.deliver("id.1.2000:42")
	require.EqualValues(t, 42, w.granted())
	require.EqualValues(t, 1, wakeups.Load())
	h.deliver("other:7") // nobody's
	h.deliver("id.1.2000")
	h.deliver("id.1.2000")
	require.EqualValues(t, 3, wakeups.Load())
	require.NoError(t, h.close())
}
