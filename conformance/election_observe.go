package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/fencing"
)

// observePoll is the observer's poll interval in ElectionObserve. Every
// term lasts until the observer has shown it, many intervals at least.
const observePoll = 20 * time.Millisecond

// observeReadTimeout is election.Observe's bound on one read of the
// leader when none is shown: a read through a partition is reported
// unknown after it (while a leader is shown, by the end of its lease).
const observeReadTimeout = 5 * time.Second

// observedSlack is how much later than its delivery the observer's
// goroutine may record an observation's time on a loaded machine. The
// next read starts after the delivery, so a read began at the previous
// observation's recorded time less this at the earliest.
const observedSlack = 250 * time.Millisecond

// observed records what an Observe channel delivered, and when, until it
// closes.
type observed struct {
	mu     sync.Mutex
	log    []election.Observation
	times  []time.Time // when each observation was received
	closed chan struct{}
}

// observe starts following name through e, recording every observation.
// The test's cleanup ends it and waits for its channel to close.
func (s *suite) observe(t *testing.T, e *election.Elector, name string) (*observed, context.CancelFunc) {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	ch, err := e.Observe(c, name)
	require.NoError(t, err)
	o := &observed{closed: make(chan struct{})}
	go func() {
		defer close(o.closed)
		for obs := range ch {
			now := time.Now()
			o.mu.Lock()
			o.log = append(o.log, obs)
			o.times = append(o.times, now)
			o.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-o.closed
	})
	return o, cancel
}

func (o *observed) snapshot() []election.Observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.log)
}

// snapshotTimes returns the observations and when each was received.
func (o *observed) snapshotTimes() ([]election.Observation, []time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.log), slices.Clone(o.times)
}

// await waits up to d for an observation from index from on that matches,
// and returns the index after it.
func (o *observed) await(t testing.TB, from int, d time.Duration, what string, match func(election.Observation) bool) int {
	t.Helper()
	until := time.Now().Add(d)
	for {
		log := o.snapshot()
		for i := from; i < len(log); i++ {
			if match(log[i]) {
				return i + 1
			}
		}
		if time.Now().After(until) {
			require.FailNowf(t, "not observed", "the observer did not show %s within %v; it showed %s", what, d, describe(log[from:]))
		}
		time.Sleep(observePoll / 2)
	}
}

// describe renders observations for a failure message.
func describe(log []election.Observation) string {
	s := "["
	for i, o := range log {
		if i > 0 {
			s += " "
		}
		switch {
		case o.Err != nil:
			s += "unknown(" + o.Err.Error() + ")"
		case o.Leader == nil:
			s += "none"
		default:
			s += fmt.Sprintf("%d:%q", o.Leader.Token, o.Leader.Value)
		}
	}
	return s + "]"
}

// observedTerm is one term of ElectionObserve: its token, the values it
// had in order, when the test saw it granted (its Campaign returned, after
// the backend granted it) and when the test began to end it (before the
// backend could end it; zero while it lasts).
type observedTerm struct {
	token   fencing.Token
	values  []string
	granted time.Time
	ending  time.Time
}

// leaderless reports whether nobody may have led at some instant between
// lo and hi (lo zero: from the start): before the first term was granted,
// from the moment the test began to end a term until the next was granted,
// or once the test began to end the last one.
func leaderless(lo, hi time.Time, terms []observedTerm) bool {
	if len(terms) == 0 || !lo.After(terms[0].granted) {
		return true
	}
	for i, tm := range terms {
		if tm.ending.IsZero() || tm.ending.After(hi) {
			continue
		}
		if i+1 == len(terms) || !terms[i+1].granted.Before(lo) {
			return true
		}
	}
	return false
}

// checkObservations checks what an observer delivered (and when each
// observation was received) against the terms granted, in grant order: a
// leader's token never goes back, no term shows after a later one or after
// a "no leader" that followed it (it was seen to end), every term is seen,
// a token shows only the values its term had, in order (Proclaim keeps the
// token), no token shows that was not granted, "no leader" shows only if
// it was read while nobody may have led (the read began after the previous
// delivery and ended before this one), and an unknown is an error matching
// backend.ErrUnavailable. It returns one line per violation.
func checkObservations(log []election.Observation, times []time.Time, terms []observedTerm) []string {
	var bad []string
	index := make(map[fencing.Token]int, len(terms))
	for i, tm := range terms {
		index[tm.token] = i
	}
	seen := make([]bool, len(terms))
	cur, val := -1, -1 // the newest term shown, and its newest value
	ended := false     // a "no leader" showed after the newest term
	for k, o := range log {
		switch {
		case o.Err != nil:
			if !errors.Is(o.Err, backend.ErrUnavailable) {
				bad = append(bad, fmt.Sprintf("observation %d: unknown with an error that is not ErrUnavailable: %v", k, o.Err))
			}
			continue
		case o.Leader == nil:
			var lo time.Time
			if k > 0 {
				lo = times[k-1].Add(-observedSlack)
			}
			if !leaderless(lo, times[k], terms) {
				bad = append(bad, fmt.Sprintf("observation %d: no leader, read between %s and %s while a term held throughout", k,
					lo.Format("15:04:05.000"), times[k].Format("15:04:05.000")))
			}
			ended = cur >= 0
			continue
		}
		i, ok := index[o.Leader.Token]
		if !ok {
			bad = append(bad, fmt.Sprintf("observation %d: term %d (%q) was never granted", k, o.Leader.Token, o.Leader.Value))
			continue
		}
		if o.Leader.Name == "" {
			bad = append(bad, fmt.Sprintf("observation %d: a leader without the election's name", k))
		}
		if i < cur {
			bad = append(bad, fmt.Sprintf("observation %d: term %d after the later term %d", k, o.Leader.Token, terms[cur].token))
			continue
		}
		if i == cur && ended {
			bad = append(bad, fmt.Sprintf("observation %d: term %d again after no leader showed it ended", k, o.Leader.Token))
			continue
		}
		v := slices.Index(terms[i].values, o.Leader.Value)
		switch {
		case v < 0:
			bad = append(bad, fmt.Sprintf("observation %d: term %d with value %q, which it never had (%q)", k, o.Leader.Token, o.Leader.Value, terms[i].values))
		case i == cur && v < val:
			bad = append(bad, fmt.Sprintf("observation %d: term %d went back to its value %q", k, o.Leader.Token, o.Leader.Value))
		}
		if i > cur {
			val = -1
		}
		cur, val, ended = i, max(val, v), false
		seen[i] = true
	}
	for i, ok := range seen {
		if !ok {
			bad = append(bad, fmt.Sprintf("term %d (%q) was never observed", terms[i].token, terms[i].values))
		}
	}
	return bad
}

// testElectionObserve: an observer (its own Locker, polling every 20ms)
// sees every term in order and never an older term after a newer one
// (etcd#18163: Observe reported a leader that had been replaced), sees a
// Proclaim'd value with the same token, and shows "no leader" before the
// first term and after the last, and only while nobody may lead (the test
// notes when each term was granted and when it began to end it). The
// leader hands over by Resign, is crashed (the next leads within the
// expiry bound), revoked, paused (no renewal past its TTL), and, when the
// harness is a Partitioner, cut off by a partition (its Done fires, and the
// next leader's term is larger); then the observer itself is partitioned
// for a while: it shows unknown (an error matching ErrUnavailable) within
// the leader's TTL, never "no leader", while a term is held, and once the partition heals the
// leader with the value it proclaimed meanwhile. Every term lasts until the
// observer has shown it: the poll interval is small next to the bounds, so
// that is a fair requirement on a loaded machine, and a term the observer
// skips fails the case.
func (s *suite) testElectionObserve(t *testing.T) {
	name := lockName(t)
	obsLocker := s.locker(t)
	eo := elector(t, obsLocker, election.WithPollInterval(observePoll))
	o, stop := s.observe(t, eo, name)
	r := &observeRun{s: s, t: t, name: name, obsLocker: obsLocker, eo: eo, o: o}
	r.at = o.await(t, 0, s.prompt, "no leader before the first campaign", func(obs election.Observation) bool {
		return obs.Err == nil && obs.Leader == nil
	})
	require.Equal(t, 1, r.at, "the first observation is no leader: %s", describe(o.snapshot()))
	r.c = ctx(t, 3*time.Minute)

	b := r.resign()
	d := r.crash(b)
	e := r.revoke(d)
	q := r.pause(e)
	last, lastValue := q, "q"
	if pt, ok := s.h.(Partitioner); ok {
		last = r.partitionLeader(pt, q)
		lastValue = r.partitionObserver(pt, last)
	}
	r.finish(last, lastValue, stop)
}

// observeRun is one run of ElectionObserve: the election, the observer,
// the terms granted so far and how far the observer's log was matched.
type observeRun struct {
	s         *suite
	t         *testing.T
	name      string
	obsLocker *backend.Locker   // the observer's
	eo        *election.Elector // the observer's
	o         *observed         // what it delivered
	c         context.Context   // the background campaigns'
	terms     []observedTerm    // granted, in order, with their values and times
	at        int               // the index of the first observation not yet matched
}

// seen waits until the observer shows term with value.
func (r *observeRun) seen(term *election.Term, value, what string) {
	r.t.Helper()
	r.at = r.o.await(r.t, r.at, r.s.prompt, fmt.Sprintf("%s (term %d, %q)", what, term.Token(), value), func(obs election.Observation) bool {
		return obs.Leader != nil && obs.Leader.Token == term.Token() && obs.Leader.Value == value
	})
}

// record notes a term the test saw granted at granted, and the values it
// will have.
func (r *observeRun) record(term *election.Term, granted time.Time, values ...string) {
	r.terms = append(r.terms, observedTerm{token: term.Token(), values: values, granted: granted})
}

// endAt notes that the test began to end term at when (nothing ended it
// earlier).
func (r *observeRun) endAt(term *election.Term, when time.Time) {
	r.t.Helper()
	i := slices.IndexFunc(r.terms, func(tm observedTerm) bool { return tm.token == term.Token() })
	require.GreaterOrEqual(r.t, i, 0, "term %d not recorded", term.Token())
	r.terms[i].ending = when
}

// waiting campaigns in the background on a Locker of its own, and
// returns once it is queued.
func (r *observeRun) waiting(value string, opts ...backend.Option) chan campaignResult {
	r.t.Helper()
	return r.waitingOn(r.s.locker(r.t), value, opts...)
}

// waitingOn is waiting on Locker l (one the case will crash or cut off).
func (r *observeRun) waitingOn(l *backend.Locker, value string, opts ...backend.Option) chan campaignResult {
	r.t.Helper()
	ch := goCampaign(r.t, r.c, elector(r.t, l), r.name, value, opts...)
	requireCampaigning(r.t, ch, r.s.settle, value)
	r.s.requireQueued(r.t, r.obsLocker, r.name, 1)
	return ch
}

// handOver: prev resigns, and the candidate waiting on ch, value, leads
// next (what names it in a failure); its term is recorded.
func (r *observeRun) handOver(prev *election.Term, ch chan campaignResult, value, what string) campaignResult {
	r.t.Helper()
	r.endAt(prev, time.Now())
	require.NoError(r.t, prev.Resign(ctx(r.t, r.s.prompt)))
	next := elected(r.t, ch, r.s.prompt, what)
	r.record(next.term, next.at, value)
	return next
}

// resign: the first leader a proclaims a2, then resigns; b, waiting,
// leads next. It returns b's term.
func (r *observeRun) resign() *election.Term {
	s, t := r.s, r.t
	a := s.campaign(t, elector(t, s.locker(t)), r.name, "a", s.prompt)
	r.record(a, time.Now(), "a", "a2")
	r.seen(a, "a", "the first leader")
	require.NoError(t, a.Proclaim(ctx(t, s.prompt), "a2"))
	s.requireLeader(t, r.eo, a, "a2", "Proclaim keeps the term")
	r.seen(a, "a2", "the first leader's Proclaim")
	b := r.handOver(a, r.waiting("b"), "b", "b after a resigned").term
	r.seen(b, "b", "the leader after a Resign")
	return b
}

// crash: b resigns to c (short TTL), whose Locker is crashed; d leads
// once c's TTL ran out. It returns d's term.
func (r *observeRun) crash(b *election.Term) *election.Term {
	s, t := r.s, r.t
	cLocker := s.locker(t)
	cTerm := r.handOver(b, r.waitingOn(cLocker, "c", s.shortTTL()...), "c", "c after b resigned").term
	r.seen(cTerm, "c", "the leader that will crash")
	chD := r.waiting("d", s.shortTTL()...) // to be revoked: see the Loss case
	r.endAt(cTerm, time.Now())
	s.h.Crash(t, cLocker)
	rd := elected(t, chD, s.expiry, "d after the leader crashed")
	d := rd.term
	require.Greater(t, d.Token(), cTerm.Token())
	requireNotBefore(t, rd.at, cTerm.Lease())
	requireClosed(t, cTerm.Done(), s.expiry, "the crashed leader's Done")
	r.record(d, rd.at, "d")
	r.seen(d, "d", "the leader after a crash")
	return d
}

// revoke: d's lease is revoked; e leads next. It returns e's term.
func (r *observeRun) revoke(d *election.Term) *election.Term {
	s, t := r.s, r.t
	chE := r.waiting("e")
	r.endAt(d, time.Now())
	s.h.Revoke(t, d.Lease())
	re := elected(t, chE, s.expiry, "e after the leader was revoked")
	e := re.term
	require.Greater(t, e.Token(), d.Token())
	requireClosed(t, d.Done(), s.expiry, "the revoked leader's Done")
	r.record(e, re.at, "e")
	r.seen(e, "e", "the leader after a revoke")
	return e
}

// pause: e resigns to p, a leader that does not renew and loses its term
// at its TTL; q leads next. p renews by hand (Refresh) until the observer
// has shown it, so that a stall of a loaded machine longer than its TTL
// cannot end it unseen, and then stops. It returns q's term.
func (r *observeRun) pause(e *election.Term) *election.Term {
	s, t := r.s, r.t
	pTTL := max(s.short, time.Second)
	rp := r.handOver(e, r.waiting("p", backend.WithTTL(pTTL), backend.WithAutoRenew(false)), "p", "p after e resigned")
	p := rp.term
	stopRefresh, refreshed := make(chan struct{}), make(chan time.Time, 1)
	go func() {
		// last is when the last Refresh that succeeded began: the backend
		// ends the term after it.
		last := rp.at
		defer func() { refreshed <- last }()
		tick := time.NewTicker(pTTL / 5)
		defer tick.Stop()
		for {
			start := time.Now()
			rctx, cancel := context.WithTimeout(context.Background(), pTTL)
			err := p.Lease().Refresh(rctx)
			cancel()
			if err != nil {
				return // the term ended: seen below fails, or saw it first
			}
			last = start
			select {
			case <-stopRefresh:
				return
			case <-tick.C:
			}
		}
	}()
	r.seen(p, "p", "the leader that will pause")
	close(stopRefresh)
	r.endAt(p, <-refreshed)
	chQ := r.waiting("q")
	rq := elected(t, chQ, pTTL+s.expiry, "q after the leader paused past its TTL")
	q := rq.term
	require.Greater(t, q.Token(), p.Token())
	requireLostBy(t, rq.at, p.Lease(), "the paused leader's Done, although the next leads,")
	r.record(q, rq.at, "q")
	r.seen(q, "q", "the leader after a pause")
	return q
}

// partitionLeader: q resigns to f, which is cut off by a partition: its
// Done fires, and g leads next with a larger term. It returns g's term.
func (r *observeRun) partitionLeader(pt Partitioner, q *election.Term) *election.Term {
	s, t := r.s, r.t
	fLocker := s.locker(t)
	f := r.handOver(q, r.waitingOn(fLocker, "f", s.shortTTL()...), "f", "f after q resigned").term
	r.seen(f, "f", "the leader that will be partitioned")
	chG := r.waiting("g", s.shortTTL()...) // the observer's bound while it shows g
	r.endAt(f, time.Now())
	heal := healOnce(t, pt.Partition(t, fLocker))
	requireClosed(t, f.Done(), s.expiry, "the partitioned leader's Done")
	rg := elected(t, chG, s.expiry+s.prompt, "g after the leader was partitioned")
	g := rg.term
	require.Greater(t, g.Token(), f.Token())
	requireNotBefore(t, rg.at, f.Lease())
	r.record(g, rg.at, "g")
	r.seen(g, "g", "the leader after a partition")
	heal()
	return g
}

// partitionObserver partitions the observer while g leads: it shows
// unknown, never "no leader", within g's TTL (it does not go on naming g
// for longer than g's term could last unrenewed); g proclaims meanwhile,
// and the observer shows its new value once the partition heals. It
// returns that value.
//
// (Half a TTL of slack, for a loaded machine; Observe's fixed 5s bound,
// before, failed it.) A backend whose Status cannot tell a holder's TTL
// left (ZooKeeper: another session's timeout is the ensemble's) gets
// Observe's 5s bound on a read.
func (r *observeRun) partitionObserver(pt Partitioner, g *election.Term) string {
	s, t := r.s, r.t
	unknownWithin := s.short + s.short/2
	if st, err := r.obsLocker.Status(ctx(t, s.prompt), r.name); err != nil || st.Holder == nil || st.Holder.TTLLeft < 0 {
		unknownWithin = observeReadTimeout + s.prompt
	}
	cut := len(r.o.snapshot())
	healObs := healOnce(t, pt.Partition(t, r.obsLocker))
	r.at = r.o.await(t, r.at, unknownWithin, "unknown while the observer is partitioned", func(obs election.Observation) bool {
		return obs.Err != nil || obs.Leader == nil // "no leader" fails below
	})
	lastValue := "g2"
	r.terms[len(r.terms)-1].values = append(r.terms[len(r.terms)-1].values, lastValue)
	require.NoError(t, g.Proclaim(ctx(t, s.prompt), lastValue))
	time.Sleep(observeReadTimeout / 2) // the observer's reads go on failing
	during := r.o.snapshot()[cut:]
	healObs()
	unknown := 0
	for _, obs := range during {
		switch {
		case obs.Err != nil:
			unknown++
			assert.ErrorIs(t, obs.Err, backend.ErrUnavailable, "an unknown while the observer is partitioned")
		case obs.Leader == nil:
			assert.Failf(t, "no leader through a partition", "the partitioned observer showed no leader while g leads, not unknown: %s", describe(during))
		}
	}
	require.Positive(t, unknown, "the partitioned observer showed no unknown: %s", describe(during))
	r.seen(g, lastValue, "the leader's new value once the observer's partition healed")
	return lastValue
}

// finish resigns the last term (with lastValue), waits for "no leader",
// ends the observer (stop) and checks everything it delivered against
// the terms recorded (checkObservations).
func (r *observeRun) finish(last *election.Term, lastValue string, stop context.CancelFunc) {
	s, t := r.s, r.t
	r.endAt(last, time.Now())
	require.NoError(t, last.Resign(ctx(t, s.prompt)))
	r.o.await(t, r.at, s.prompt, "no leader after the last Resign", func(obs election.Observation) bool {
		return obs.Err == nil && obs.Leader == nil
	})
	stop()
	requireClosed(t, r.o.closed, s.prompt, "the Observe channel after its context ended")

	log, times := r.o.snapshotTimes()
	unknown := 0
	for _, obs := range log {
		if obs.Err != nil {
			unknown++
		}
	}
	t.Logf("%d observations of %d terms (%d unknown; last value %q): %s", len(log), len(r.terms), unknown, lastValue, describe(log))
	assert.Empty(t, checkObservations(log, times, r.terms), "observations")
}
