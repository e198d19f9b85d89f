package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
)

// Harness connects the suite to one backend. Each adapter's tests provide one
// (over a real server), and so can users, to run the suite against their own
// cluster. Its methods are called from several goroutines at once (the
// suite's cases run concurrently): they must be safe for that.
type Harness interface {
	// NewLocker returns a Locker with its own client connection, as a
	// separate process would have. opts are Locker defaults. The harness
	// closes it when the test ends.
	NewLocker(t testing.TB, opts ...backend.Option) *backend.Locker
	// Crash makes l vanish as if its process died: its connection to the
	// backend is cut, so from now on its renewals and releases fail and
	// nothing it held is released; its locks must expire server-side.
	Crash(t testing.TB, l *backend.Locker)
	// Revoke removes the lease behind lease on the server, as an operator
	// or a server-side expiry would (etcd: revoke the lease; mem: drop it),
	// without going through the holder's Locker.
	Revoke(t testing.TB, lease *backend.Lease)
	// Capabilities says what the backend guarantees and how the suite
	// should size its timings.
	Capabilities() Capabilities
}

// Capabilities describes a backend to the suite.
type Capabilities struct {
	// FIFO: waiters are granted the lock in the order they started waiting.
	FIFO bool
	// TTL is the short lease TTL the suite uses for expiry cases; it must be
	// at least MinTTL. Keep it small to keep the suite fast (etcd: 2s).
	TTL time.Duration
	// MinTTL is the backend's minimum TTL: the suite checks that a shorter
	// one is rejected with ErrInvalidOption.
	MinTTL time.Duration
	// MaxTTL, if not zero, is the backend's maximum TTL (a ZooKeeper
	// server's maxSessionTimeout): the suite's long leases, 15*TTL and at
	// least 30s, are cut to it. It must leave them room to outlive a few
	// expiries: at least 4*TTL+4s.
	MaxTTL time.Duration
	// LockDelay: the backend honours a lock-delay (backend.WithLockDelay):
	// the suite runs its lock-delay cases; without it, it checks that the
	// option is refused with ErrInvalidOption.
	LockDelay bool
}

// CapabilitiesOf returns the Capabilities an adapter declares with its URL
// scheme (driver.Scheme.Suite).
func CapabilitiesOf(p driver.SuiteProfile) Capabilities {
	return Capabilities{FIFO: p.FIFO, TTL: p.TTL, MinTTL: p.MinTTL, MaxTTL: p.MaxTTL, LockDelay: p.LockDelay}
}

// check reports Capabilities the suite cannot run with.
func (c Capabilities) check() error {
	switch {
	case c.TTL <= 0:
		return fmt.Errorf("conformance: Capabilities.TTL must be set")
	case c.MinTTL < 0 || c.MaxTTL < 0:
		return fmt.Errorf("conformance: negative Capabilities.MinTTL %v or MaxTTL %v", c.MinTTL, c.MaxTTL)
	case c.TTL < c.MinTTL:
		return fmt.Errorf("conformance: Capabilities.TTL %v is under MinTTL %v", c.TTL, c.MinTTL)
	case c.MaxTTL > 0 && c.MaxTTL < c.minLong():
		return fmt.Errorf("conformance: Capabilities.MaxTTL %v leaves no room for the suite's long leases with TTL %v: it needs at least %v (4*TTL+4s); give a shorter TTL or raise the backend's maximum (ZooKeeper: maxSessionTimeout)",
			c.MaxTTL, c.TTL, c.minLong())
	}
	return nil
}

// longTTL is the TTL of the suite's leases that must not expire during a
// case: 15*TTL, at least 30s, at most MaxTTL.
func (c Capabilities) longTTL() time.Duration {
	long := max(30*time.Second, 15*c.TTL)
	if c.MaxTTL > 0 {
		long = min(long, c.MaxTTL)
	}
	return long
}

// minLong is the shortest long TTL the suite can work with: twice the
// expiry bound (2*TTL+2s), so that a long lease outlives a case's expiries.
func (c Capabilities) minLong() time.Duration { return 4*c.TTL + 4*time.Second }

// WaiterRevoker is an optional extension of Harness. A harness that
// implements it enables the WaiterRevoked case (etcd#19597, etcd#11456: a
// waiter whose lease is gone must return ErrLeaseLost, neither keep waiting
// nor be told it holds the lock). The suite cannot get a Lease handle for a
// waiter, so it asks the harness by name.
type WaiterRevoker interface {
	// RevokeWaiters removes on the server, as Revoke does for a holder, the
	// lease of every acquisition still waiting for lock name (never the
	// holder's), and returns how many it removed.
	RevokeWaiters(t testing.TB, name string) int
}

// Partitioner is an optional extension of Harness. A harness that
// implements it runs the Partitioned case (a blocked Acquire must return
// when its context ends even when the backend cannot be reached, and leave
// nothing behind once the partition heals); one that does not, such as an
// in-process backend's, does not have the case.
type Partitioner interface {
	// Partition cuts l off from the backend as a network partition does:
	// its connections stay open but nothing gets through either way, and
	// new ones hang too, until heal is called. Bytes sent meanwhile may be
	// delivered after heal.
	Partition(t testing.TB, l *backend.Locker) (heal func())
}

// waiterListed bounds how long RevokeWaitersByID waits for a waiter that
// has blocked to show in Status.
const waiterListed = 5 * time.Second

// RevokeWaitersByID is RevokeWaiters for a harness whose backend implements
// Locker.Status and Locker.RevokeID: it revokes, through admin, every
// waiter that admin's Status lists for name, by its Entry.ID. A waiter can
// join the backend's queue a moment after its Acquire is seen blocking (its
// request may still be on its way), so it reads Status until it lists a
// waiter, for waiterListed at most.
func RevokeWaitersByID(t testing.TB, admin *backend.Locker, name string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var st backend.Status
	for listed := time.Now().Add(waiterListed); ; time.Sleep(10 * time.Millisecond) {
		var err error
		st, err = admin.Status(ctx, name)
		require.NoError(t, err)
		if len(st.Waiters) > 0 || time.Now().After(listed) {
			break
		}
	}
	n := 0
	for _, w := range st.Waiters {
		found, err := admin.RevokeID(ctx, name, w.ID)
		require.NoError(t, err)
		if found {
			n++
		}
	}
	return n
}
