package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
)

// elector returns an Elector over l.
func elector(t testing.TB, l *backend.Locker, opts ...election.Option) *election.Elector {
	t.Helper()
	e, err := election.New(l, opts...)
	require.NoError(t, err)
	return e
}

// keep registers a cleanup that resigns term (its result is checked by
// the cases that care).
func keep(t testing.TB, term *election.Term) *election.Term {
	if term != nil {
		t.Cleanup(func() {
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = term.Resign(c)
		})
	}
	return term
}

// campaign campaigns for name and fails the test unless this candidate
// leads within d.
func (s *suite) campaign(t testing.TB, e *election.Elector, name, value string, d time.Duration, opts ...backend.Option) *election.Term {
	t.Helper()
	term, err := e.Campaign(ctx(t, d), name, value, opts...)
	require.NoError(t, err, "Campaign(%q, %q) within %v", name, value, d)
	require.NotNil(t, term)
	return keep(t, term)
}

// campaignResult is the outcome of a Campaign run in the background.
type campaignResult struct {
	term *election.Term
	err  error
	at   time.Time // when Campaign returned
}

// goCampaign runs Campaign in the background. A term it returns is
// resigned when the test ends.
func goCampaign(t testing.TB, c context.Context, e *election.Elector, name, value string, opts ...backend.Option) chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		term, err := e.Campaign(c, name, value, opts...)
		ch <- campaignResult{term: term, err: err, at: time.Now()}
	}()
	t.Cleanup(func() {
		select {
		case r := <-ch:
			if r.term != nil {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = r.term.Resign(c)
			}
		default:
		}
	})
	return ch
}

// elected returns the term of a background Campaign, failing unless it
// led within d.
func elected(t testing.TB, ch <-chan campaignResult, d time.Duration, what string) campaignResult {
	t.Helper()
	select {
	case r := <-ch:
		keep(t, r.term)
		require.NoError(t, r.err, what)
		require.NotNil(t, r.term, what)
		return r
	case <-time.After(d):
		require.FailNowf(t, "not elected", "%s: not leading within %v", what, d)
		return campaignResult{}
	}
}

// requireCampaigning checks that a background Campaign has not returned
// within d.
func requireCampaigning(t testing.TB, ch chan campaignResult, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-ch:
		keep(t, r.term)
		ch <- r
		require.FailNowf(t, "did not wait", "%s returned early: term %v, err %v", what, r.term != nil, r.err)
	case <-time.After(d):
	}
}

// await calls read until it returns "", up to the prompt bound, and fails
// the test with read's last answer if it never does. A check of what a
// Locker other than the one that changed it reads uses it: a backend may
// answer reads from a copy that lags its writes (a ZooKeeper follower), so
// a state is required to show within the bound, not at once; what a broken
// backend shows instead (an orphan, a value written late) stays, and fails
// it.
func (s *suite) await(t testing.TB, read func() string, msgAndArgs ...any) {
	t.Helper()
	until := time.Now().Add(s.prompt)
	for {
		wrong := read()
		if wrong == "" {
			return
		}
		if time.Now().After(until) {
			require.FailNowf(t, "not shown", "%s: after %v: %s", message(msgAndArgs), s.prompt, wrong)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// message renders testify-style msgAndArgs.
func message(msgAndArgs []any) string {
	switch {
	case len(msgAndArgs) == 0:
		return "state"
	case len(msgAndArgs) == 1:
		return fmt.Sprint(msgAndArgs[0])
	}
	if f, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(f, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

// requireLeader checks that e's Leader of term's election shows term,
// with value (within the prompt bound: see await).
func (s *suite) requireLeader(t testing.TB, e *election.Elector, term *election.Term, value string, msgAndArgs ...any) {
	t.Helper()
	want := election.Leader{Name: term.Name(), Token: term.Token(), Value: value}
	s.await(t, func() string {
		ld, err := e.Leader(ctx(t, s.prompt), term.Name())
		ld.ID = ""
		if err != nil || ld != want {
			return fmt.Sprintf("Leader shows %+v, %v; want %+v", ld, err, want)
		}
		return ""
	}, msgAndArgs...)
}

// requireNoLeader checks that e's Leader of name says nobody leads (within
// the prompt bound: see await).
func (s *suite) requireNoLeader(t testing.TB, e *election.Elector, name string, msgAndArgs ...any) {
	t.Helper()
	s.await(t, func() string {
		ld, err := e.Leader(ctx(t, s.prompt), name)
		if !errors.Is(err, election.ErrNoLeader) || errors.Is(err, backend.ErrUnavailable) {
			return fmt.Sprintf("Leader shows %+v, %v; want ErrNoLeader", ld, err)
		}
		return ""
	}, msgAndArgs...)
}

// termEnd is how a term of ElectionOneLeader ends.
type termEnd int

const (
	endResign termEnd = iota
	endCrash          // the leader's Locker is crashed: its term expires
	endRevoke         // the leader's lease is revoked on the server
)

// harnessCall asks the test's goroutine to crash a Locker or revoke a
// lease (the Harness may fail the test, which only the test's goroutine
// can do) and closes done once it has.
type harnessCall struct {
	crash  *backend.Locker
	revoke *backend.Lease
	done   chan struct{}
}

// testElectionOneLeader: candidates on separate Lockers campaign in a
// loop, and each term writes through one fencing guard with its term
// number and then resigns, or has its Locker crashed or its lease revoked.
// At most one candidate leads at a time: the guard never sees a term
// number lower than one it admitted, no two terms overlap (the history
// checker, kubernetes#67651), Leader shows the term's own token and value
// while it lasts, and term numbers strictly increase. It guards against
// simultaneous leaders (CURATOR-460) and leaders without fencing
// (kubernetes#23731). Terms that will be crashed or revoked have the
// short TTL (their leader notices a revoke by its renewal at the latest,
// as in the Loss case), the others the long one, so that no term is lost
// by accident.
func (s *suite) testElectionOneLeader(t *testing.T) {
	// Each candidate's Lockers: one, and one more for each of its terms
	// that is crashed (made here: the Harness may fail the test).
	lockers := make([][]*backend.Locker, oneLeaderCandidates)
	for i := range lockers {
		lockers[i] = []*backend.Locker{s.locker(t)}
		for r := range oneLeaderRounds {
			if oneLeaderEnd(i, r) == endCrash {
				lockers[i] = append(lockers[i], s.locker(t))
			}
		}
	}
	name := lockName(t)
	o := &oneLeader{sections: newSections(name), s: s, c: ctx(t, 3*time.Minute), calls: make(chan harnessCall), lockers: lockers}

	var wg sync.WaitGroup
	for i := range oneLeaderCandidates {
		wg.Go(func() { o.candidate(i) })
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	o.serve(t, done)

	require.Empty(t, o.errs)
	assert.Zero(t, o.overlaps.Load(), "terms overlapped")
	holds := o.hist.snapshot()
	require.Len(t, holds, oneLeaderCandidates*oneLeaderRounds)
	assert.Empty(t, checkHistory(holds), "term history (%d terms)", len(holds))
	s.requireNoLeader(t, elector(t, s.locker(t)), name, "after every term ended")
}

// ElectionOneLeader's candidates, and the terms each wins.
const (
	oneLeaderCandidates = 3
	oneLeaderRounds     = 8
)

// oneLeaderEnd is how candidate i's term of round r ends: two crashes and
// two revokes among the terms, the rest resigned.
func oneLeaderEnd(i, r int) termEnd {
	switch {
	case i == 0 && r == 2, i == 1 && r == 5:
		return endCrash
	case i == 2 && r == 3, i == 0 && r == 6:
		return endRevoke
	}
	return endResign
}

// oneLeader is one run of ElectionOneLeader: its terms' sections, the
// candidates' Lockers, and the channel on which candidates ask the test's
// goroutine for a crash or a revoke.
type oneLeader struct {
	*sections
	s       *suite
	c       context.Context
	calls   chan harnessCall
	lockers [][]*backend.Locker // by candidate: one, and one per crashed term
}

// serve crashes and revokes what the candidates ask for (calls), on the
// test's goroutine, until done closes.
func (o *oneLeader) serve(t *testing.T, done <-chan struct{}) {
	for running := true; running; {
		select {
		case hc := <-o.calls:
			if hc.crash != nil {
				o.s.h.Crash(t, hc.crash)
			} else {
				o.s.h.Revoke(t, hc.revoke)
			}
			close(hc.done)
		case <-done:
			running = false
		}
	}
}

// call asks serve to make hc, and reports whether it did before the
// run's context ended.
func (o *oneLeader) call(hc harnessCall) bool {
	hc.done = make(chan struct{})
	select {
	case o.calls <- hc:
	case <-o.c.Done():
		return false
	}
	select {
	case <-hc.done:
		return true
	case <-o.c.Done():
		return false
	}
}

// candidate is candidate i's loop: it campaigns for each round's term
// (the short TTL for one to be crashed or revoked), leads, and ends the
// term; after a crash it goes on with its next Locker.
func (o *oneLeader) candidate(i int) {
	who := fmt.Sprintf("candidate%d", i)
	next := 0
	e, err := election.New(o.lockers[i][next])
	if err != nil {
		o.fail("%s: election.New: %v", who, err)
		return
	}
	for r := range oneLeaderRounds {
		mode := oneLeaderEnd(i, r)
		var opts []backend.Option
		if mode != endResign {
			opts = o.s.shortTTL()
		}
		value := fmt.Sprintf("%s/term%d", who, r)
		term, err := e.Campaign(o.c, o.name, value, opts...)
		if err != nil {
			o.fail("%s: Campaign %d: %v", who, r, err)
			return
		}
		o.lead(who, e, term, value)
		if !o.end(who, term, mode, o.lockers[i][next]) {
			return
		}
		if mode == endCrash {
			next++
			if e, err = election.New(o.lockers[i][next]); err != nil {
				o.fail("%s: election.New: %v", who, err)
				return
			}
		}
	}
}

// lead is a term's section: two guarded writes with its term number, a
// check that Leader shows it with value and that it still holds, and its
// record in the history.
func (o *oneLeader) lead(who string, e *election.Elector, term *election.Term, value string) {
	start := o.enter()
	o.write(o.c, who, "of term", term.Token())
	// A backend that cannot answer says so (ErrUnavailable: a busy
	// machine's server, a reconnecting client) and is asked again, twice
	// at most; a wrong answer fails at once.
	var (
		ld  election.Leader
		err error
	)
	for try := 0; ; try++ {
		lctx, cancel := context.WithTimeout(o.c, o.s.prompt)
		ld, err = e.Leader(lctx, o.name)
		cancel()
		if !errors.Is(err, backend.ErrUnavailable) || try == 2 {
			break
		}
	}
	if err != nil || ld.Token != term.Token() || ld.Value != value {
		o.fail("%s: Leader during term %d (%q) shows %+v, %v", who, term.Token(), value, ld, err)
	}
	if err := term.Err(); err != nil {
		o.fail("%s: term %d lost while leading: %v", who, term.Token(), err)
	}
	o.leave(who, term.Token(), start)
}

// end ends term as mode says: it resigns, or has serve crash l or revoke
// the term's lease and checks that the term ends with ErrLeaseLost within
// the expiry bound. It reports false if the run's context ended first.
func (o *oneLeader) end(who string, term *election.Term, mode termEnd, l *backend.Locker) bool {
	switch mode {
	case endResign:
		rctx, cancel := context.WithTimeout(o.c, o.s.prompt)
		if err := term.Resign(rctx); err != nil {
			o.fail("%s: Resign of term %d: %v", who, term.Token(), err)
		}
		cancel()
		return true
	case endCrash:
		if !o.call(harnessCall{crash: l}) {
			return false
		}
	case endRevoke:
		if !o.call(harnessCall{revoke: term.Lease()}) {
			return false
		}
	}
	select {
	case <-term.Done():
		if !errors.Is(term.Err(), backend.ErrLeaseLost) {
			o.fail("%s: term %d ended by a crash or revoke with %v, not ErrLeaseLost", who, term.Token(), term.Err())
		}
	case <-time.After(o.s.expiry):
		o.fail("%s: term %d did not end within %v of its crash or revoke", who, term.Token(), o.s.expiry)
	}
	return true
}

// testElectionResignHandsOver: Resign hands the election to the next
// candidate at once, not after the resigned term's TTL: leaders hold the
// long TTL, and each waiting candidate must lead within the prompt bound
// (far below it) after the previous leader resigned, with a larger term
// number, in campaign order where the backend queues. This is issue 16's
// "after a clean Resign, within one handoff"; client-go's leaderelection
// releases only with ReleaseOnCancel, and otherwise the next leader waits
// out the lease (client-go#728).
func (s *suite) testElectionResignHandsOver(t *testing.T) {
	name := lockName(t)
	admin := s.locker(t)
	eo := elector(t, admin)
	first := s.campaign(t, elector(t, s.locker(t)), name, "first", s.prompt)

	// Both waiting candidates report to one channel, by value.
	type led struct {
		value string
		campaignResult
	}
	c := ctx(t, s.long)
	values := []string{"second", "third"}
	results := make(chan led, len(values))
	t.Cleanup(func() {
		for {
			select {
			case r := <-results:
				keep(t, r.term)
			default:
				return
			}
		}
	})
	for i, v := range values {
		e := elector(t, s.locker(t))
		go func() {
			term, err := e.Campaign(c, name, v)
			results <- led{v, campaignResult{term: term, err: err, at: time.Now()}}
		}()
		s.requireQueued(t, admin, name, i+1)
	}

	prev := first
	for i := range values {
		start := time.Now()
		require.NoError(t, prev.Resign(ctx(t, s.prompt)))
		require.True(t, isClosed(prev.Done()), "a resigned term's Done")
		require.ErrorIs(t, prev.Err(), backend.ErrReleased)
		require.NotErrorIs(t, prev.Err(), backend.ErrLeaseLost)

		var r led
		select {
		case r = <-results:
		case <-time.After(s.prompt):
			require.FailNow(t, "no hand-over", "no candidate led within %v of the leader's Resign (its TTL is %v)", s.prompt, s.long)
		}
		keep(t, r.term)
		require.NoError(t, r.err, "%s candidate", r.value)
		t.Logf("%s candidate led %v after the Resign", r.value, r.at.Sub(start))
		if s.caps.FIFO {
			require.Equal(t, values[i], r.value, "the candidate that campaigned first leads first")
		}
		require.Greater(t, r.term.Token(), prev.Token(), "term numbers increase")
		s.requireLeader(t, eo, r.term, r.value)
		prev = r.term
	}
	require.NoError(t, prev.Resign(ctx(t, s.prompt)))
	s.requireNoLeader(t, eo, name, "after the last Resign")
}

// testElectionCancelledCampaign: a Campaign given up while queued returns
// an error matching ErrNotAcquired and the context's error, and leaves
// nothing behind: Status lists no waiter for it, and when the leader
// resigns nobody leads (no stale candidate is handed the election, the
// orphan-queue-node bug, go-zookeeper#229); a new candidate then leads at
// once with its own value.
func (s *suite) testElectionCancelledCampaign(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool
		want   error
	}{
		{"Deadline", false, context.DeadlineExceeded},
		{"Cancel", true, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := lockName(t)
			admin := s.locker(t)
			eo := elector(t, admin)
			leader := s.campaign(t, elector(t, s.locker(t)), name, "leader", s.prompt)

			// The candidate's Locker takes and releases another lock
			// first, so that its connections (a pool's, a listener's)
			// are up before the deadline starts: under load, setting
			// them up took longer than answered() on a Docker
			// PostgreSQL, and the campaign then ended unanswered
			// (ErrUnavailable), not queued.
			candidate := s.locker(t)
			release(t, s.acquire(t, candidate, name+"-warm", s.prompt))
			var cctx context.Context
			var cancel context.CancelFunc
			if tc.cancel {
				cctx, cancel = context.WithCancel(context.Background())
			} else {
				cctx, cancel = context.WithTimeout(context.Background(), s.answered())
			}
			defer cancel()
			el := elector(t, candidate)
			ch := goCampaign(t, cctx, el, name, "stale")
			if tc.cancel {
				requireCampaigning(t, ch, s.settle, "candidate before cancel")
				s.requireQueued(t, admin, name, 1)
				cancel()
			}
			var r campaignResult
			select {
			case r = <-ch:
			case <-time.After(s.answered() + s.prompt):
				require.FailNow(t, "Campaign did not return after its context ended")
			}
			keep(t, r.term)
			require.Nil(t, r.term, "a given-up campaign must not lead")
			require.ErrorIs(t, r.err, backend.ErrNotAcquired)
			require.ErrorIs(t, r.err, tc.want)
			require.NotErrorIs(t, r.err, backend.ErrUnavailable)

			// Nothing is left queued: the candidate is not listed (read
			// until the prompt bound, for a backend whose reads through
			// another connection may lag; an orphan stays for the long
			// TTL).
			s.requireNoWaiters(t, admin, name)
			s.requireLeader(t, eo, leader, "leader")

			require.NoError(t, leader.Resign(ctx(t, s.prompt)))
			s.requireNoLeader(t, eo, name, "after the leader resigned: the given-up candidate must not lead")
			next := s.campaign(t, el, name, "next", s.prompt)
			assert.Greater(t, next.Token(), leader.Token())
			s.requireLeader(t, eo, next, "next")
			require.NoError(t, next.Resign(ctx(t, s.prompt)))
		})
	}
}

// requireNoWaiters waits, up to the prompt bound, until l's Status lists
// no waiter of name.
func (s *suite) requireNoWaiters(t testing.TB, l *backend.Locker, name string) {
	t.Helper()
	until := time.Now().Add(s.prompt)
	for {
		st, err := l.Status(ctx(t, s.prompt), name)
		require.NoError(t, err)
		if len(st.Waiters) == 0 {
			return
		}
		require.True(t, time.Now().Before(until), "waiters of %q still listed after %v: %+v", name, s.prompt, st.Waiters)
		time.Sleep(10 * time.Millisecond)
	}
}
