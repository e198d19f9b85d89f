package conformance

import (
	"context"
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

// observed records what an Observe channel delivered, until it closes.
type observed struct {
	mu     sync.Mutex
	log    []election.Observation
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
			o.mu.Lock()
			o.log = append(o.log, obs)
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

// observedTerm is one term of ElectionObserve and the values it had, in
// order.
type observedTerm struct {
	token  fencing.Token
	values []string
}

// checkObservations checks what an observer delivered against the terms
// granted, in grant order: a leader's token never goes back, no term shows
// after a later one, every term is seen, a token shows only the values its
// term had, in order (Proclaim keeps the token), and no token shows that
// was not granted. It returns one line per violation.
func checkObservations(log []election.Observation, terms []observedTerm) []string {
	var bad []string
	index := make(map[fencing.Token]int, len(terms))
	for i, tm := range terms {
		index[tm.token] = i
	}
	seen := make([]bool, len(terms))
	cur, val := -1, -1 // the newest term shown, and its newest value
	for k, o := range log {
		if o.Leader == nil {
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
		cur, val = i, max(val, v)
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
// first term and after the last. The leader hands over by Resign, is
// crashed (the next leads within the expiry bound), revoked, paused (no
// renewal past its TTL), and, when the harness is a Partitioner, cut off
// by a partition (its Done fires, and the next leader's term is larger).
// Every term lasts until the observer has shown it: the poll interval is
// small next to the bounds, so that is a fair requirement on a loaded
// machine, and a term the observer skips fails the case.
func (s *suite) testElectionObserve(t *testing.T) {
	name := lockName(t)
	obsLocker := s.locker(t)
	eo := elector(t, obsLocker, election.WithPollInterval(observePoll))
	o, stop := s.observe(t, eo, name)
	var terms []observedTerm // granted, in order, with their values
	// at is the index of the first observation not yet matched.
	at := o.await(t, 0, s.prompt, "no leader before the first campaign", func(obs election.Observation) bool {
		return obs.Err == nil && obs.Leader == nil
	})
	require.Equal(t, 1, at, "the first observation is no leader: %s", describe(o.snapshot()))
	// seen waits until the observer shows term with value.
	seen := func(term *election.Term, value, what string) {
		t.Helper()
		at = o.await(t, at, s.prompt, fmt.Sprintf("%s (term %d, %q)", what, term.Token(), value), func(obs election.Observation) bool {
			return obs.Leader != nil && obs.Leader.Token == term.Token() && obs.Leader.Value == value
		})
	}
	record := func(term *election.Term, values ...string) {
		terms = append(terms, observedTerm{term.Token(), values})
	}
	c := ctx(t, 3*time.Minute)
	// waiting campaigns in the background, and returns once it is queued.
	waiting := func(value string, opts ...backend.Option) chan campaignResult {
		t.Helper()
		ch := goCampaign(t, c, elector(t, s.locker(t)), name, value, opts...)
		requireCampaigning(t, ch, s.settle, value)
		s.requireQueued(t, obsLocker, name, 1)
		return ch
	}

	// Resign, with a Proclaim before it.
	a := s.campaign(t, elector(t, s.locker(t)), name, "a", s.prompt)
	record(a, "a", "a2")
	seen(a, "a", "the first leader")
	require.NoError(t, a.Proclaim(ctx(t, s.prompt), "a2"))
	s.requireLeader(t, eo, a, "a2", "Proclaim keeps the term")
	seen(a, "a2", "the first leader's Proclaim")
	chB := waiting("b")
	require.NoError(t, a.Resign(ctx(t, s.prompt)))
	b := elected(t, chB, s.prompt, "b after a resigned").term
	record(b, "b")
	seen(b, "b", "the leader after a Resign")

	// Crash: the next leads once the crashed leader's short TTL ran out.
	cLocker := s.locker(t)
	chC := goCampaign(t, c, elector(t, cLocker), name, "c", s.shortTTL()...)
	requireCampaigning(t, chC, s.settle, "c")
	s.requireQueued(t, obsLocker, name, 1)
	require.NoError(t, b.Resign(ctx(t, s.prompt)))
	cTerm := elected(t, chC, s.prompt, "c after b resigned").term
	record(cTerm, "c")
	seen(cTerm, "c", "the leader that will crash")
	chD := waiting("d", s.shortTTL()...) // to be revoked: see the Loss case
	s.h.Crash(t, cLocker)
	rd := elected(t, chD, s.expiry, "d after the leader crashed")
	d := rd.term
	require.Greater(t, d.Token(), cTerm.Token())
	requireNotBefore(t, rd.at, cTerm.Lease())
	requireClosed(t, cTerm.Done(), s.expiry, "the crashed leader's Done")
	record(d, "d")
	seen(d, "d", "the leader after a crash")

	// Revoke.
	chE := waiting("e")
	s.h.Revoke(t, d.Lease())
	e := elected(t, chE, s.expiry, "e after the leader was revoked").term
	require.Greater(t, e.Token(), d.Token())
	requireClosed(t, d.Done(), s.expiry, "the revoked leader's Done")
	record(e, "e")
	seen(e, "e", "the leader after a revoke")

	// Pause: a leader that does not renew loses its term at its TTL. Its
	// TTL is at least a second, so that the observer sees it first.
	pTTL := max(s.short, time.Second)
	chP := waiting("p", backend.WithTTL(pTTL), backend.WithAutoRenew(false))
	require.NoError(t, e.Resign(ctx(t, s.prompt)))
	p := elected(t, chP, s.prompt, "p after e resigned").term
	record(p, "p")
	seen(p, "p", "the leader that will pause")
	chQ := waiting("q")
	rq := elected(t, chQ, pTTL+s.expiry, "q after the leader paused past its TTL")
	q := rq.term
	require.Greater(t, q.Token(), p.Token())
	requireNotBefore(t, rq.at, p.Lease())
	require.True(t, isClosed(p.Done()), "the paused leader's Done has not fired although the next leads")
	record(q, "q")
	seen(q, "q", "the leader after a pause")
	last := q

	// Partition: the cut-off leader's Done fires, the next leads.
	if pt, ok := s.h.(Partitioner); ok {
		fLocker := s.locker(t)
		chF := goCampaign(t, c, elector(t, fLocker), name, "f", s.shortTTL()...)
		requireCampaigning(t, chF, s.settle, "f")
		s.requireQueued(t, obsLocker, name, 1)
		require.NoError(t, q.Resign(ctx(t, s.prompt)))
		f := elected(t, chF, s.prompt, "f after q resigned").term
		record(f, "f")
		seen(f, "f", "the leader that will be partitioned")
		chG := waiting("g")
		heal := healOnce(t, pt.Partition(t, fLocker))
		requireClosed(t, f.Done(), s.expiry, "the partitioned leader's Done")
		rg := elected(t, chG, s.expiry+s.prompt, "g after the leader was partitioned")
		g := rg.term
		require.Greater(t, g.Token(), f.Token())
		requireNotBefore(t, rg.at, f.Lease())
		record(g, "g")
		seen(g, "g", "the leader after a partition")
		heal()
		last = g
	}

	require.NoError(t, last.Resign(ctx(t, s.prompt)))
	o.await(t, at, s.prompt, "no leader after the last Resign", func(obs election.Observation) bool {
		return obs.Err == nil && obs.Leader == nil
	})
	stop()
	requireClosed(t, o.closed, s.prompt, "the Observe channel after its context ended")

	log := o.snapshot()
	unknown := 0
	for _, obs := range log {
		if obs.Err != nil {
			unknown++
		}
	}
	t.Logf("%d observations of %d terms (%d unknown): %s", len(log), len(terms), unknown, describe(log))
	assert.Empty(t, checkObservations(log, terms), "observations")
}
