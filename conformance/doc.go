// Package conformance is the shared test suite every fencelock backend must
// pass: mutual exclusion checked through a fencing guard and an offline
// history checker, TryAcquire, waiting and cancelled waits, crashed holders
// and waiters, renewal, lease loss and its signal, the local deadline,
// Release and Close semantics, stale holders fenced off, name handling and
// input validation, FIFO hand-over where the backend promises it (a few
// waiters, then a queue of 100 over four Lockers), and leader election
// over the backend (package election): at most one leader at a time
// through a fencing guard and the history checker, observers that see
// every term in order and never a stale one while leaders resign, crash,
// are revoked, pause and are partitioned, Resign handing over without an
// expiry, a cancelled Campaign leaving nothing, and Proclaim and candidate
// values (WithValue) as Status and Leader show them.
//
// An adapter runs it from its tests over a real server, and a user can run
// it against their own cluster. Implement Harness and call Run:
//
//	type harness struct{ srv *mem.Server; mu sync.Mutex; conns map[*backend.Locker]*mem.Conn }
//
//	func (h *harness) NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker {
//		conn := h.srv.Connect()
//		l, err := mem.New(conn, opts...)
//		require.NoError(t, err)
//		h.mu.Lock(); h.conns[l] = conn; h.mu.Unlock()
//		t.Cleanup(func() { _ = l.Close() })
//		return l
//	}
//	func (h *harness) Crash(t testing.TB, l *backend.Locker) { h.mu.Lock(); defer h.mu.Unlock(); h.conns[l].Cut() }
//	func (h *harness) Revoke(t testing.TB, ls *backend.Lease) { require.True(t, h.srv.Revoke(ls.Name(), ls.Token())) }
//	func (h *harness) Capabilities() conformance.Capabilities {
//		return conformance.Capabilities{FIFO: true, TTL: 300 * time.Millisecond, MinTTL: mem.MinTTL}
//	}
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, &harness{srv: mem.NewServer(), conns: map[*backend.Locker]*mem.Conn{}})
//	}
//
// Then: go test -race -run TestConformance ./yourpkg (add /CaseName to run
// one case, e.g. -run 'TestConformance/HolderCrash').
//
// What the suite expects of a Harness:
//   - NewLocker gives every Locker its own connection (a separate process)
//     and closes it when the test ends. The suite closes some Lockers
//     itself, so the harness's Close must tolerate that (Locker.Close is
//     idempotent); it should not fail the test on the Close error of a
//     Locker it crashed.
//   - Crash cuts one Locker's connection; Revoke removes one lease on the
//     server. Neither may touch other Lockers.
//   - Every method is called from several goroutines at once: the cases run
//     concurrently (DefaultParallel at a time), so a harness that keeps
//     state (a map of Lockers to crash) guards it with a mutex. A harness
//     that cannot be shared so runs with WithParallel(1).
//   - Capabilities.TTL is the short TTL for expiry cases; every time bound
//     is derived from it (expiry within 2*TTL+2s, "promptly" within 5s,
//     against a TTL of 15*TTL, at least 30s and at most MaxTTL, for leases
//     that must not expire). Cases run concurrently (see below), so a run
//     takes about as long as its longest case, ElectionObserve: about
//     15*TTL plus a few seconds (mem at 300ms: ~5s; etcd at 2s: ~15 to
//     35s on a loaded machine). Every adapter of this module
//     declares its Capabilities with its URL scheme (driver.Scheme.Suite,
//     see URLCapabilities).
//   - Capabilities.LockDelay says the backend enforces a lock-delay
//     (backend.WithLockDelay): the LockDelay cases then check that a
//     crashed holder's lock is granted to nobody before its deadline plus
//     the delay and to a waiter after, that a release is not delayed, and
//     that a delay of 0 changes nothing; without it they check that the
//     option is refused with ErrInvalidOption.
//   - Optionally, WaiterRevoker enables the WaiterRevoked case; a backend
//     with Locker.Status and Locker.RevokeID gets it from
//     RevokeWaitersByID. URLHarness has it for every scheme.
//   - Optionally, Partitioner adds the Partitioned case (an Acquire cut
//     off by a network partition returns when its context ends, and leaves
//     nothing once it heals, and more), the CutWaiter case (a queued waiter
//     cut off is ErrUnavailable, never ErrNotAcquired, within its TTL),
//     and ElectionObserve partitions a
//     leader too. URLHarness has it, through its proxies.
//
// Lock names are unique per run (test name plus a random suffix, under
// "fencelock-conformance/"), so the suite can run repeatedly against a live
// cluster. Leases are released and Lockers closed at the end of each case;
// a case that fails midway leaves at most leases that expire with their TTL.
//
// Cases run concurrently, DefaultParallel (8) at a time, the longest first:
// most of them spend their time waiting for a TTL, not working, and each
// uses lock names of its own. WithParallel(1) runs them one after the
// other. The suite is written for noisy machines (two shared cores, the
// race detector): bounds are generous, and "promptly" is told apart from
// "after an expiry" by giving the lease in question a long TTL, not by
// tight timing.
package conformance
