package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/fencing"
)

// requireStatusValue checks that l's Status of name shows the
// acquisition with token as the holder, with value (within the prompt
// bound: see await), and returns that holder's entry.
func (s *suite) requireStatusValue(t testing.TB, l *backend.Locker, name string, token fencing.Token, value string, msgAndArgs ...any) backend.Entry {
	t.Helper()
	var holder backend.Entry
	s.await(t, func() string {
		st, err := l.Status(ctx(t, s.prompt), name)
		switch {
		case err != nil:
			return fmt.Sprintf("Status: %v", err)
		case st.Holder == nil:
			return fmt.Sprintf("Status shows no holder; want token %d with value %q", token, value)
		case st.Holder.Token != token || st.Holder.Value != value:
			return fmt.Sprintf("Status shows the holder with token %d and value %q; want token %d with value %q",
				st.Holder.Token, st.Holder.Value, token, value)
		}
		holder = *st.Holder
		return ""
	}, msgAndArgs...)
	return holder
}

// fencedWrite writes to resource through guard with token, and reports
// whether the write ran.
func (s *suite) fencedWrite(t testing.TB, guard fencing.Guard, resource string, token fencing.Token) (bool, error) {
	wrote := false
	err := guard.Do(ctx(t, s.prompt), resource, token, func(context.Context) error {
		wrote = true
		return nil
	})
	return wrote, err
}

// requireFencedOff checks that a stale leader's write with old, after the
// next leader wrote with cur, is rejected as stale and does not run.
func (s *suite) requireFencedOff(t testing.TB, guard fencing.Guard, resource string, old, cur fencing.Token) {
	t.Helper()
	wrote, err := s.fencedWrite(t, guard, resource, old)
	require.ErrorIs(t, err, fencing.ErrStaleToken, "the stale leader's write")
	var stale *fencing.StaleTokenError
	require.True(t, errors.As(err, &stale), "the rejection is a *fencing.StaleTokenError: %v", err)
	assert.Equal(t, old, stale.Token)
	assert.Equal(t, cur, stale.Highest)
	assert.False(t, wrote, "the stale leader's write must not run")
}

// testElectionProclaim: Proclaim replaces the leader's value and keeps its
// token (Leader and Status show the new value with the same term number);
// after the term is revoked or lapsed a Proclaim returns ErrLeaseLost and
// stores nothing: what Leader shows does not change, even when the next
// leader's record is already there; and the stale leader's writes through
// a fencing guard are rejected once the next leader wrote
// (kubernetes#23731: a leader without fencing corrupts what the next one
// writes). Those Proclaims are refused by the Lease once it saw its loss,
// before the driver; with a Partitioner, InFlight has the backend itself
// refuse a Proclaim that reaches it after the next leader's record is
// there (a Proclaim must never overwrite it).
func (s *suite) testElectionProclaim(t *testing.T) {
	admin := s.locker(t)
	eo := elector(t, admin)

	t.Run("KeepsTerm", func(t *testing.T) { s.proclaimKeepsTerm(t, admin, eo) })
	// Revoked with nobody waiting, and with a candidate that leads next.
	t.Run("Revoked", func(t *testing.T) { s.proclaimRevoked(t, admin, eo, false) })
	t.Run("RevokedThenNextLeads", func(t *testing.T) { s.proclaimRevoked(t, admin, eo, true) })
	t.Run("Paused", func(t *testing.T) { s.proclaimPaused(t, eo) })
	if pt, ok := s.h.(Partitioner); ok {
		t.Run("InFlight", func(t *testing.T) { s.proclaimInFlight(t, pt, admin, eo) })
	}
	t.Run("LockLease", s.proclaimLockLease)
}

// proclaimKeepsTerm: Proclaim replaces the value and keeps the token,
// Leader and Status show each new value, and a Proclaim after Resign
// returns ErrReleased.
func (s *suite) proclaimKeepsTerm(t *testing.T, admin *backend.Locker, eo *election.Elector) {
	name := lockName(t)
	term := s.campaign(t, elector(t, s.locker(t)), name, "v1", s.prompt)
	token := term.Token()
	for _, v := range []string{"v2", "v2", "välue ✓", ""} {
		require.NoError(t, term.Proclaim(ctx(t, s.prompt), v), "Proclaim(%q)", v)
		require.Equal(t, token, term.Token(), "Proclaim changed the term's token")
		require.Equal(t, v, term.Value())
		require.NoError(t, term.Err(), "the term after Proclaim")
		s.requireLeader(t, eo, term, v, "Leader after Proclaim(%q)", v)
		s.requireStatusValue(t, admin, name, token, v, "Status after Proclaim(%q)", v)
	}
	require.NoError(t, term.Resign(ctx(t, s.prompt)))
	require.ErrorIs(t, term.Proclaim(ctx(t, s.prompt), "late"), backend.ErrReleased, "Proclaim after Resign")
	s.requireNoLeader(t, eo, name, "after Resign and a Proclaim")
}

// proclaimRevoked: a Proclaim of a revoked term returns ErrLeaseLost and
// stores nothing, with nobody waiting or (next) with a candidate that
// leads next, whose value a late Proclaim does not overwrite and whose
// write fences off the old leader's.
func (s *suite) proclaimRevoked(t *testing.T, admin *backend.Locker, eo *election.Elector, next bool) {
	name := lockName(t)
	guard := fencing.NewMemory()
	old := s.campaign(t, elector(t, s.locker(t)), name, "old", s.prompt)
	_, err := s.fencedWrite(t, guard, name, old.Token())
	require.NoError(t, err)
	var ch chan campaignResult
	if next {
		ch = goCampaign(t, ctx(t, s.long), elector(t, s.locker(t)), name, "next")
		requireCampaigning(t, ch, s.settle, "next candidate")
		s.requireQueued(t, admin, name, 1)
	}
	s.h.Revoke(t, old.Lease())
	// At once: before or after the old leader noticed, and maybe
	// while the next one is granted, the outcome is the same.
	require.ErrorIs(t, old.Proclaim(ctx(t, s.prompt), "late"), backend.ErrLeaseLost, "Proclaim right after the revoke")
	requireClosed(t, old.Done(), s.expiry, "the revoked term's Done")
	require.ErrorIs(t, old.Proclaim(ctx(t, s.prompt), "later"), backend.ErrLeaseLost, "Proclaim after the loss signal")
	require.Equal(t, "old", old.Value(), "a failed Proclaim changed the term's value")
	if !next {
		s.requireNoLeader(t, eo, name, "after the revoke and a late Proclaim")
		return
	}
	cur := elected(t, ch, s.expiry, "next candidate after the revoke").term
	require.Greater(t, cur.Token(), old.Token())
	require.ErrorIs(t, old.Proclaim(ctx(t, s.prompt), "latest"), backend.ErrLeaseLost, "Proclaim after the next leader was granted")
	s.requireLeader(t, eo, cur, "next", "a late Proclaim overwrote the next leader's value")
	_, err = s.fencedWrite(t, guard, name, cur.Token())
	require.NoError(t, err)
	s.requireFencedOff(t, guard, name, old.Token(), cur.Token())
	require.NoError(t, cur.Resign(ctx(t, s.prompt)))
}

// proclaimPaused: a leader paused past its TTL (it does not renew) is
// replaced, and neither its Proclaim nor its writes get through
// afterwards.
func (s *suite) proclaimPaused(t *testing.T, eo *election.Elector) {
	name := lockName(t)
	guard := fencing.NewMemory()
	old := s.campaign(t, elector(t, s.locker(t)), name, "paused", s.prompt, s.shortTTL(backend.WithAutoRenew(false))...)
	_, err := s.fencedWrite(t, guard, name, old.Token())
	require.NoError(t, err)
	r := elected(t, goCampaign(t, ctx(t, s.expiry), elector(t, s.locker(t)), name, "next"), s.expiry, "next candidate while the leader is paused")
	cur := r.term
	require.Greater(t, cur.Token(), old.Token())
	requireNotBefore(t, r.at, old.Lease())
	_, err = s.fencedWrite(t, guard, name, cur.Token())
	require.NoError(t, err)

	// The old leader wakes up.
	s.requireFencedOff(t, guard, name, old.Token(), cur.Token())
	require.ErrorIs(t, old.Proclaim(ctx(t, s.prompt), "late"), backend.ErrLeaseLost)
	s.requireLeader(t, eo, cur, "next", "a late Proclaim overwrote the next leader's value")
	require.True(t, isClosed(old.Done()), "the paused leader's Done has not fired although the next leads")
	require.NoError(t, cur.Resign(ctx(t, s.prompt)))
}

// proclaimInFlight: a Proclaim sent while the term was this lease's,
// held by a partition until the term was revoked on the server and the
// next leader proclaimed: the backend must refuse it when it arrives, as
// only the term's own record may be changed (a driver that writes the
// value unconditionally overwrites the next leader's). The old leader does
// not renew and has the long TTL, so that nothing ends its term before
// the Proclaim started: its Proclaim reaches the driver.
func (s *suite) proclaimInFlight(t *testing.T, pt Partitioner, admin *backend.Locker, eo *election.Elector) {
	name := lockName(t)
	oldLocker := s.locker(t)
	old := s.campaign(t, elector(t, oldLocker), name, "old", s.prompt, backend.WithAutoRenew(false))
	ch := goCampaign(t, ctx(t, s.long), elector(t, s.locker(t)), name, "next")
	requireCampaigning(t, ch, s.settle, "next candidate")
	s.requireQueued(t, admin, name, 1)

	heal := healOnce(t, pt.Partition(t, oldLocker))
	pctx := ctx(t, s.long)
	proclaimed := make(chan error, 1)
	go func() { proclaimed <- old.Proclaim(pctx, "late") }()
	select {
	case err := <-proclaimed:
		require.FailNowf(t, "Proclaim returned through a partition", "Proclaim of a held term returned before its partition healed: %v", err)
	case <-time.After(s.settle):
	}
	// The term was still held when Proclaim began (a loss is for
	// good), so it went to the driver.
	require.NoError(t, old.Err(), "the term ended before its Proclaim was sent")

	s.h.Revoke(t, old.Lease())
	cur := elected(t, ch, s.expiry, "next candidate after the revoke").term
	require.Greater(t, cur.Token(), old.Token())
	require.NoError(t, cur.Proclaim(ctx(t, s.prompt), "next2"))
	s.requireLeader(t, eo, cur, "next2", "the next leader's Proclaim")

	heal()
	select {
	case err := <-proclaimed:
		t.Logf("the Proclaim held by the partition: %v", err)
		require.Error(t, err, "a Proclaim that reached the backend after the term was revoked succeeded")
		if !errors.Is(err, backend.ErrLeaseLost) {
			require.ErrorIs(t, err, backend.ErrUnavailable, "the Proclaim held by the partition")
		}
	case <-time.After(s.expiry + s.prompt):
		require.FailNowf(t, "Proclaim hung", "the Proclaim held by the partition has not returned %v after it healed", s.expiry+s.prompt)
	}
	require.Equal(t, "old", old.Value(), "a failed Proclaim changed the term's value")
	// What the partition held may reach the backend after the call
	// returned (on the loss signal): a request through the old
	// Locker, behind it, and a moment for the rest.
	_, _ = oldLocker.Status(ctx(t, s.prompt), name)
	time.Sleep(s.settle)
	s.requireLeader(t, eo, cur, "next2", "a Proclaim held by a partition overwrote the next leader's value")
	s.requireStatusValue(t, admin, name, cur.Token(), "next2", "a Proclaim held by a partition overwrote the next leader's value")
	require.NoError(t, cur.Resign(ctx(t, s.prompt)))
}

// proclaimLockLease: a lock acquired without a value has none to
// proclaim.
func (s *suite) proclaimLockLease(t *testing.T) {
	name := lockName(t)
	ls := s.try(t, s.locker(t), name)
	require.ErrorIs(t, ls.Proclaim(ctx(t, s.prompt), "v"), backend.ErrInvalidOption)
	require.NoError(t, ls.Err())
	release(t, ls)
}

// testElectionValueInStatus: a value given with WithValue is stored in
// place of the holder identity and metadata (even when WithHolder and
// WithMetadata are given too) and shown by Status as Entry.Value, for the
// holder and for a waiter; values round-trip byte for byte through
// Campaign, Proclaim, Leader and Status (Unicode, the empty string, one
// that looks like the JSON record some backends store for a lock, and one
// of MaxValueLen bytes); and a value that cannot be stored (a NUL byte,
// invalid UTF-8, longer than MaxValueLen) is rejected with
// ErrInvalidOption before anything reaches the backend: a crashed Locker
// rejects it just the same, and a held term keeps its value.
func (s *suite) testElectionValueInStatus(t *testing.T) {
	admin := s.locker(t)
	eo := elector(t, admin)

	t.Run("Holder", func(t *testing.T) {
		name := lockName(t)
		a, b := s.locker(t), s.locker(t)
		// The value replaces the holder identity and metadata, given or
		// default.
		la := s.try(t, a, name, backend.WithHolder("someone"), backend.WithMetadata(map[string]string{"k": "v"}),
			backend.WithValue("holder value"))
		assert.Equal(t, "holder value", la.Value())
		assert.Empty(t, la.Holder(), "a value is stored in place of the holder identity")
		h := s.requireStatusValue(t, admin, name, la.Token(), "holder value")
		assert.Empty(t, h.Holder, "a value is stored in place of the holder identity")
		assert.Empty(t, h.Metadata, "a value is stored in place of the metadata")

		ch := goAcquire(t, ctx(t, s.long), b, name, backend.WithValue("waiter value"))
		requireWaiting(t, ch, s.settle, "waiter with a value")
		s.requireQueued(t, admin, name, 1)
		st, err := admin.Status(ctx(t, s.prompt), name)
		require.NoError(t, err)
		require.Len(t, st.Waiters, 1)
		assert.Equal(t, "waiter value", st.Waiters[0].Value, "a waiter's value")
		release(t, la)
		r := wait(t, ch, s.prompt, "waiter with a value after the holder released")
		require.NoError(t, r.err)
		s.requireStatusValue(t, admin, name, r.lease.Token(), "waiter value")
		release(t, r.lease)
	})

	t.Run("RoundTrip", func(t *testing.T) {
		name := lockName(t)
		e := elector(t, s.locker(t))
		values := []string{
			"10.0.0.7:8080",
			"日本語 ✓ \U0001F512 é e\u0301",
			"",
			`{"holder":"someone","metadata":{"k":"v"}}`,
			" spaces, \"quotes\", \\ back\nslash\ttab ",
			strings.Repeat("é", backend.MaxValueLen/2),                     // MaxValueLen bytes
			strings.Repeat("x", backend.MaxValueLen-1) + "\x7f",            // MaxValueLen bytes, ending in DEL
			strings.Repeat("\U0001F512", backend.MaxValueLen/4-1) + "abcd", // MaxValueLen bytes of 4-byte runes
		}
		for i, v := range values {
			if i >= 5 {
				require.Len(t, v, backend.MaxValueLen)
			}
			term := s.campaign(t, e, name, v, s.prompt)
			s.requireLeader(t, eo, term, v, "value %d after Campaign", i)
			s.requireStatusValue(t, admin, name, term.Token(), v, "value %d after Campaign", i)
			w := values[(i+1)%len(values)]
			require.NoError(t, term.Proclaim(ctx(t, s.prompt), w))
			s.requireLeader(t, eo, term, w, "value %d after Proclaim", (i+1)%len(values))
			s.requireStatusValue(t, admin, name, term.Token(), w, "value %d after Proclaim", (i+1)%len(values))
			require.NoError(t, term.Resign(ctx(t, s.prompt)))
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		name := lockName(t)
		bad := []struct{ what, value string }{
			{"NUL", "a\x00b"},
			{"invalid UTF-8", "a\xffb"},
			{"truncated UTF-8", "a\xe6\x97"},
			{"too long", strings.Repeat("x", backend.MaxValueLen+1)},
		}
		// A crashed Locker: anything sent to the backend would fail
		// (ErrUnavailable) or hang instead.
		crashed := s.locker(t)
		s.h.Crash(t, crashed)
		ec := elector(t, crashed)
		for _, tc := range bad {
			_, err := ec.Campaign(ctx(t, s.prompt), name, tc.value)
			require.ErrorIs(t, err, backend.ErrInvalidOption, "Campaign with a value with %s", tc.what)
			require.NotErrorIs(t, err, backend.ErrUnavailable, tc.what)
			for call, acq := range map[string]func(context.Context, string, ...backend.Option) (*backend.Lease, error){
				"Acquire": crashed.Acquire, "TryAcquire": crashed.TryAcquire,
			} {
				ls, err := acq(ctx(t, s.prompt), name, backend.WithValue(tc.value))
				hold(t, ls)
				require.Nil(t, ls)
				require.ErrorIs(t, err, backend.ErrInvalidOption, "%s with a value with %s", call, tc.what)
			}
		}

		// A held term keeps its value when a Proclaim is refused.
		term := s.campaign(t, elector(t, s.locker(t)), name, "good", s.prompt)
		for _, tc := range bad {
			require.ErrorIs(t, term.Proclaim(ctx(t, s.prompt), tc.value), backend.ErrInvalidOption, "Proclaim with %s", tc.what)
			require.NoError(t, term.Err(), "the term after a refused Proclaim")
			require.Equal(t, "good", term.Value())
		}
		s.requireLeader(t, eo, term, "good", "after refused Proclaims")
		require.NoError(t, term.Resign(ctx(t, s.prompt)))
		s.requireNoLeader(t, eo, name, "after the only term resigned")
	})
}
