package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// Run runs the whole suite against the backend behind h, one named subtest
// per case (run a single one with -run 'TestX/CaseName'). Cases run
// concurrently, DefaultParallel at a time (WithParallel changes it; 1 runs
// them one after the other), the longest first: each works on lock names
// and Lockers of its own, and most of the suite's time is cases waiting
// for TTLs to pass, so one run takes about as long as its longest case
// instead of the sum of all. Their time bounds are generous (see suite),
// so that a neighbour's load does not fail them on a busy machine.
func Run(t *testing.T, h Harness, opts ...RunOption) {
	o := runOptions{parallel: DefaultParallel}
	for _, opt := range opts {
		opt(&o)
	}
	s := newSuite(t, h)
	// Longest first (measured: 11 runs of the suite on every backend), so
	// that the last ones to start are short.
	cases := []suiteCase{
		{"ElectionObserve", s.testElectionObserve},
		{"AutoRenew", s.testAutoRenew},
		{"Telemetry", s.testTelemetry},
		{"HolderCrash", s.testHolderCrash},
		{"LockDelayCrash", s.testLockDelayCrash},
		{"LockDelayRelease", s.testLockDelayRelease},
		{"LockDelayZero", s.testLockDelayZero},
		{"ElectionOneLeader", s.testElectionOneLeader},
		{"MaxHold", s.testMaxHold},
		{"MutualExclusion", s.testMutualExclusion},
		{"ReleaseIdempotent", s.testReleaseIdempotent},
		{"WaiterCrash", s.testWaiterCrash},
		{"CancelWhileWaiting", s.testCancelWhileWaiting},
		{"ElectionProclaim", s.testElectionProclaim},
		{"Loss", s.testLoss},
		{"Deadline", s.testDeadline},
		{"ElectionCancelledCampaign", s.testElectionCancelledCampaign},
		{"Errors", s.testErrors},
		{"StaleHolderFenced", s.testStaleHolderFenced},
		{"FIFO", s.testFIFO},
		{"LongQueueFIFO", s.testLongQueueFIFO},
		{"Close", s.testClose},
		{"WaiterRevoked", s.testWaiterRevoked},
		{"IndependentNames", s.testIndependentNames},
		{"ElectionValueInStatus", s.testElectionValueInStatus},
		{"AcquireBlocksUntilRelease", s.testAcquireBlocksUntilRelease},
		{"SameLockerTwoHandles", s.testSameLockerTwoHandles},
		{"ElectionResignHandsOver", s.testElectionResignHandsOver},
		{"BadInput", s.testBadInput},
		{"TryAcquire", s.testTryAcquire},
		{"CancelledCalls", s.testCancelledCalls},
	}
	if p, ok := h.(Partitioner); ok {
		// Before the short cases: ClosePartitioned takes 7s.
		cases = slices.Insert(cases, 6,
			suiteCase{"ClosePartitioned", func(t *testing.T) { s.testClosePartitioned(t, p) }},
			suiteCase{"Unavailable", func(t *testing.T) { s.testUnavailable(t, p) }},
			suiteCase{"LossWhilePartitioned", func(t *testing.T) { s.testLossWhilePartitioned(t, p) }},
			suiteCase{"SuspendedResumes", func(t *testing.T) { s.testSuspendedResumes(t, p) }},
			suiteCase{"Partitioned", func(t *testing.T) { s.testPartitioned(t, p) }},
			suiteCase{"CutWaiter", func(t *testing.T) { s.testCutWaiter(t, p) }})
	}
	if o.only != nil {
		cases = onlyCases(t, cases, o.only)
	}
	runCases(t, cases, o.parallel)
}

// onlyCases keeps the cases named in only, in the suite's order; a name
// the suite does not have fails t (a typo must not pass as "nothing ran").
func onlyCases(t *testing.T, cases []suiteCase, only []string) []suiteCase {
	var kept []suiteCase
	for _, name := range only {
		i := slices.IndexFunc(cases, func(c suiteCase) bool { return c.name == name })
		if i < 0 {
			t.Fatalf("conformance: OnlyCases: the suite has no case %q (for this harness)", name)
		}
	}
	for _, c := range cases {
		if slices.Contains(only, c.name) {
			kept = append(kept, c)
		}
	}
	return kept
}

// DefaultParallel is how many cases of the suite Run runs at once by
// default.
const DefaultParallel = 8

// RunOption changes how Run runs the suite.
type RunOption func(*runOptions)

type runOptions struct {
	parallel int
	only     []string
}

// WithParallel runs n cases at once (n < 1 is taken as 1: one after the
// other, as a backend whose timings suffer from concurrent clients may
// need). The default is DefaultParallel.
func WithParallel(n int) RunOption {
	return func(o *runOptions) { o.parallel = max(n, 1) }
}

// OnlyCases runs only the named cases (as named in the subtests, for
// example "TryAcquire" or "FIFO"), for a test that checks one aspect of a
// backend (a user's permissions, a command line) and needs only the cases
// that exercise it; a name the suite does not have fails the test. By
// default (and with no names) Run runs every case. -run selects cases too,
// from outside.
func OnlyCases(names ...string) RunOption {
	return func(o *runOptions) {
		if len(names) > 0 {
			o.only = names
		}
	}
}

// suiteCase is one case of the suite: a subtest of Run.
type suiteCase struct {
	name string
	run  func(*testing.T)
}

// runCases runs each case as a subtest of t, at most parallel at once and
// in their order. The subtests are started from goroutines of their own
// (t.Run may be called from several at once), not with t.Parallel, whose
// limit (-test.parallel, GOMAXPROCS by default) is for the whole test
// binary: the cases wait for TTLs, not for the CPU.
func runCases(t *testing.T, cases []suiteCase, parallel int) {
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, c := range cases {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t.Run(c.name, c.run)
		}()
	}
	wg.Wait()
}

// suite carries the harness and the time bounds derived from its TTL.
//
// Bounds are generous on purpose: the suite must pass on a loaded two-core
// CI machine with the race detector on, and a case must still fail when
// the behaviour it checks is broken. Where a case tells "promptly" apart from
// "after a lease expired", it gives the lease the long TTL, so that the
// prompt bound can be loose and still far below the expiry.
type suite struct {
	h    Harness
	caps Capabilities
	// short is Capabilities.TTL: for leases the case wants to expire.
	short time.Duration
	// long is for leases that must not expire during a case (15*short, at
	// least 30s, at most Capabilities.MaxTTL); it is also what an orphan
	// left in the backend would block others for.
	long time.Duration
	// expiry bounds how long an unrenewed short lease takes to be gone and
	// noticed: server-side expiry, the holder's loss signal, a waiter's
	// grant.
	expiry time.Duration
	// prompt bounds what should happen at once (a hand-over after Release,
	// a cancelled wait returning); it is far below long.
	prompt time.Duration
	// settle is how long the suite lets a goroutine reach a blocking point
	// (queue as a waiter) before it relies on it being there.
	settle time.Duration
}

func newSuite(t *testing.T, h Harness) *suite {
	t.Helper()
	c := h.Capabilities()
	require.NoError(t, c.check())
	long := c.longTTL()
	return &suite{
		h:      h,
		caps:   c,
		short:  c.TTL,
		long:   long,
		expiry: 2*c.TTL + 2*time.Second,
		prompt: min(5*time.Second, long/4),
		settle: 200 * time.Millisecond,
	}
}

// locker returns a Locker whose leases default to the long TTL.
func (s *suite) locker(t *testing.T, opts ...backend.Option) *backend.Locker {
	t.Helper()
	l := s.h.NewLocker(t, append([]backend.Option{backend.WithTTL(s.long)}, opts...)...)
	require.NotNil(t, l, "Harness.NewLocker returned nil")
	return l
}

// shortTTL are the options of a lease that is meant to expire.
func (s *suite) shortTTL(more ...backend.Option) []backend.Option {
	return append([]backend.Option{backend.WithTTL(s.short)}, more...)
}

// lockName returns a lock name unique to this run of this test, so that the
// suite can run repeatedly against one cluster. It leaves room for suffixes.
func lockName(t testing.TB) string {
	const room = 64
	n := t.Name()
	if max := backend.MaxNameLen - room - 40; len(n) > max {
		n = n[len(n)-max:]
	}
	return fmt.Sprintf("fencelock-conformance/%s/%016x", n, rand.Uint64())
}

// ctx returns a context that ends after d or with the test.
func ctx(t testing.TB, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// hold registers a cleanup that releases ls (its result is checked by the
// cases that care).
func hold(t testing.TB, ls *backend.Lease) *backend.Lease {
	if ls != nil {
		t.Cleanup(func() {
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = ls.Release(c)
		})
	}
	return ls
}

// try takes a free lock with TryAcquire and fails the test if it cannot.
func (s *suite) try(t testing.TB, l *backend.Locker, name string, opts ...backend.Option) *backend.Lease {
	t.Helper()
	ls, err := l.TryAcquire(ctx(t, s.prompt), name, opts...)
	require.NoError(t, err, "TryAcquire(%q) of a free lock", name)
	require.NotNil(t, ls)
	return hold(t, ls)
}

// acquire takes a lock with Acquire, waiting at most d.
func (s *suite) acquire(t testing.TB, l *backend.Locker, name string, d time.Duration, opts ...backend.Option) *backend.Lease {
	t.Helper()
	ls, err := l.Acquire(ctx(t, d), name, opts...)
	require.NoError(t, err, "Acquire(%q) within %v", name, d)
	require.NotNil(t, ls)
	return hold(t, ls)
}

// requireHeld checks, with a fresh TryAcquire through l, that name is held
// by someone.
func (s *suite) requireHeld(t testing.TB, l *backend.Locker, name string, msgAndArgs ...any) {
	t.Helper()
	ls, err := l.TryAcquire(ctx(t, s.prompt), name)
	hold(t, ls)
	require.ErrorIs(t, err, backend.ErrNotAcquired, msgAndArgs...)
	require.Nil(t, ls, msgAndArgs...)
}

// requireQueued waits, up to three times the prompt bound, until l's
// Status lists at least n waiters of name (a waiter on a Locker of its
// own first connects, and on a loaded machine that took over 5s to a
// PostgreSQL pair in Docker; how fast it queues is not what the cases
// check), then a little longer for the answer that queued
// the last of them to reach its Acquire. A case that cancels a wait calls
// it first: a wait cut off before the backend answered it is reported as
// ErrUnavailable (whether the lock is held is then unknown), so the case
// must know the backend answered, which a fixed sleep does not tell on a
// loaded machine. The time it then allows grows with how long Status took
// to answer (a loaded machine, a distant cluster: the same delays hold up
// the answer that queued the waiter): the settle time, or 4 times the
// slowest Status call, whichever is longer, at most the prompt bound.
// Without Status it falls back to the settle time.
func (s *suite) requireQueued(t testing.TB, l *backend.Locker, name string, n int) {
	t.Helper()
	bound := 3 * s.prompt
	until := time.Now().Add(bound)
	var slowest time.Duration
	for {
		start := time.Now()
		st, err := l.Status(ctx(t, s.prompt), name)
		slowest = max(slowest, time.Since(start))
		if errors.Is(err, errors.ErrUnsupported) {
			time.Sleep(s.settle)
			return
		}
		require.NoError(t, err)
		if len(st.Waiters) >= n {
			break
		}
		require.True(t, time.Now().Before(until), "%d waiters of %q not listed within %v (%d are)", n, name, bound, len(st.Waiters))
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(min(max(s.settle, 4*slowest), s.prompt))
}

// answered bounds a wait that must end while queued, not before the
// backend answered its first request: long enough for that answer on a
// loaded two-core machine, short next to the suite's other bounds.
func (s *suite) answered() time.Duration { return min(s.prompt, 2*time.Second) }

// result is the outcome of an Acquire run in the background.
type result struct {
	lease *backend.Lease
	err   error
	at    time.Time // when Acquire returned
}

// goAcquire runs Acquire in the background. A lease it returns is released
// when the test ends.
func goAcquire(t testing.TB, c context.Context, l *backend.Locker, name string, opts ...backend.Option) chan result {
	ch := make(chan result, 1)
	go func() {
		ls, err := l.Acquire(c, name, opts...)
		ch <- result{lease: ls, err: err, at: time.Now()}
	}()
	t.Cleanup(func() {
		// Release a grant nobody collected. One still in flight ends
		// when the harness closes the Locker.
		select {
		case r := <-ch:
			if r.lease != nil {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = r.lease.Release(c)
			}
		default:
		}
	})
	return ch
}

// wait returns the result of a background Acquire, failing after d.
func wait(t testing.TB, ch <-chan result, d time.Duration, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		hold(t, r.lease)
		return r
	case <-time.After(d):
		require.FailNowf(t, "timed out", "%s: no result within %v", what, d)
		return result{}
	}
}

// requireWaiting checks that a background Acquire has not returned within d.
func requireWaiting(t testing.TB, ch chan result, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-ch:
		hold(t, r.lease)
		ch <- r
		require.FailNowf(t, "did not wait", "%s returned early: lease %v, err %v", what, r.lease != nil, r.err)
	case <-time.After(d):
	}
}

// requireClosed waits up to d for ch to be closed.
func requireClosed(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		require.FailNowf(t, "not closed", "%s not closed within %v", what, d)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// release releases ls and requires success.
func release(t testing.TB, ls *backend.Lease) {
	t.Helper()
	require.NoError(t, ls.Release(ctx(t, 10*time.Second)), "Release(%q)", ls.Name())
}
