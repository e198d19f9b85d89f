package lockbench

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/election"
)

// Candidate is one election candidate of a failover benchmark, with a
// connection of its own.
type Candidate struct {
	// Campaign blocks until the candidate leads, or ctx ends.
	Campaign func(ctx context.Context) error
	// Resign ends its term cleanly: the next candidate may lead at once.
	Resign func(ctx context.Context) error
	// Kill ends it as the death of its process would: its connection is
	// cut and nothing is released, so its term lasts until the backend
	// expires it (or, with no TTL, until the server sees the connection
	// end).
	Kill func()
	// Close, if not nil, frees what a candidate that has resigned or been
	// killed still holds in this process (its client); it is called with
	// the benchmark's timer stopped.
	Close func()
}

// Failover is one implementation's election, as BenchFailover measures it.
type Failover struct {
	// New returns a new candidate of the election (same name, same
	// server) with a connection of its own; it fails tb if it cannot.
	New func(tb testing.TB) Candidate
	// Waiting, if not nil, reports whether a candidate waits behind the
	// leader in the backend (its queue entry is written). Without it a
	// waiter counts as waiting once FailoverSettle has passed since it
	// started to campaign, as a poller does (it tries at once).
	Waiting func(ctx context.Context) (bool, error)
	// TTL is how long the backend keeps a killed leader's term after its
	// last renewal (a lease's TTL, a session timeout); zero if it has none
	// and the server ends the term when the connection ends.
	TTL time.Duration
	// RoundTrip, if not nil, measures the backend's round trip in the same
	// run, the unit of the resign failover (failover-p50-rtt).
	RoundTrip func(b *testing.B) time.Duration
}

// FailoverImpl names an election implementation of BenchFailovers; Setup
// returns its Failover for one sub-benchmark (a name of its own).
type FailoverImpl struct {
	Name  string                      // the implementation's name in benchmark names
	Setup func(b *testing.B) Failover // see FailoverImpl
}

// End is how a leader's term ends in a failover benchmark.
type End string

// The two ends BenchFailover measures.
const (
	// Resign: the leader resigns; the next candidate leads within one
	// handoff, with no TTL to wait for.
	Resign End = "resign"
	// Kill: the leader's process dies (Candidate.Kill); the next candidate
	// leads once the backend expires the term, within TTL + one handoff.
	Kill End = "kill"
)

// FailoverSettle is how long a waiter is left to settle once it waits (to
// set the watch it waits on, or to begin polling) before the leader's
// term is ended; the benchmark's timer is stopped meanwhile.
const FailoverSettle = 50 * time.Millisecond

// failoverWaitLimit bounds how long a waiter may take to show up in the
// backend's queue, and how long a failover may take, before the benchmark
// fails: far above any TTL the benchmarks use.
const failoverWaitLimit = time.Minute

// BenchFailovers is every adapter's BenchmarkFailover: impls in alternating
// rounds (Interleave), each run twice per round, its leaders ending one
// way each: round=R/impl=NAME/end=resign and round=R/impl=NAME/end=kill
// (see BenchFailover). Pool the rounds with
// benchstat -col /impl -ignore /round.
func BenchFailovers(b *testing.B, impls []FailoverImpl) {
	Interleave(b, impls, func(i FailoverImpl) string { return i.Name }, func(b *testing.B, impl FailoverImpl) {
		for _, end := range []End{Resign, Kill} {
			b.Run("end="+string(end), func(b *testing.B) { BenchFailover(b, impl.Setup(b), end) })
		}
	})
}

// BenchFailover measures b.N failovers of f's election, each from the
// moment its leader's term ends (end: the start of its Resign, or of its
// Kill) to the moment the candidate that waited behind it leads (its
// Campaign returns); only that time is timed. Each failover has a leader
// and one waiter, queued and settled (FailoverSettle) before the leader's
// end (and, for Kill with a TTL, a random time under TTL/3: a leader is
// killed at a random point of its renewal period). Resign alternates two
// candidates; Kill makes a new waiter for each failover (the killed leader
// is closed). One op is one failover: use
// -benchtime Nx (a timed run would grow b.N from the timed part alone).
//
// It reports, in ms, the p50 and max of the failovers (failover-p50-ms,
// failover-max-ms); for Resign, if f.RoundTrip is set, also the round trip
// (rtt-us) and the failovers in round trips (failover-p50-rtt,
// failover-max-rtt); for Kill, if f.TTL is set, also the TTL (ttl-ms) and
// the failovers minus the TTL (minus-ttl-p50-ms, minus-ttl-max-ms): what
// the backend and the waiter add to the expiry. A killed leader's term
// ends a TTL after its last renewal, which came up to a renewal period
// (TTL/3 for fencelock) before the kill, so that figure may be negative:
// with renewals on time it lies between -TTL/3 and 0, plus the backend's
// expiry lag and one handoff.
func BenchFailover(b *testing.B, f Failover, end End) {
	b.StopTimer()
	var rtt time.Duration
	if end == Resign && f.RoundTrip != nil {
		rtt = f.RoundTrip(b)
	}
	b.ResetTimer()
	failovers := RunFailovers(b, f, end, b.N, b.StartTimer, b.StopTimer)
	reportFailovers(b, failovers, end, f.TTL, rtt)
}

// RunFailovers runs n failovers of f's election ending its leaders as end
// says, as BenchFailover does, and returns their durations in the order
// measured; it calls start just before each leader's end and stop as soon
// as the next leads (a benchmark's StartTimer and StopTimer). It fails tb
// if a campaign or resignation fails, or if a waiter leads before the
// leader's term ends.
func RunFailovers(tb testing.TB, f Failover, end End, n int, start, stop func()) []time.Duration {
	ctx := context.Background()
	leader := f.New(tb)
	if err := leader.Campaign(ctx); err != nil {
		tb.Fatalf("first campaign: %v", err)
	}
	var spare *Candidate // Resign: the candidate that resigned last, the next waiter
	failovers := make([]time.Duration, 0, n)
	for range n {
		var waiter Candidate
		if spare != nil {
			waiter = *spare
		} else {
			waiter = f.New(tb)
		}
		led := make(chan error, 1)
		wctx, cancel := context.WithTimeout(ctx, failoverWaitLimit)
		go func() { led <- waiter.Campaign(wctx) }()
		awaitWaiting(tb, f, led)
		if end == Kill && f.TTL > 0 {
			killPhase(tb, led, f.TTL)
		}

		start()
		t0 := time.Now()
		if end == Resign {
			if err := leader.Resign(ctx); err != nil {
				tb.Fatalf("resign: %v", err)
			}
		} else {
			leader.Kill()
		}
		err := <-led
		d := time.Since(t0)
		stop()
		cancel()
		if err != nil {
			tb.Fatalf("the waiter's campaign, after the leader's %s: %v", end, err)
		}
		failovers = append(failovers, d)
		if end == Resign {
			old := leader
			spare = &old
		} else if leader.Close != nil {
			leader.Close()
		}
		leader = waiter
	}
	if err := leader.Resign(ctx); err != nil {
		tb.Fatalf("last resign: %v", err)
	}
	for _, c := range []*Candidate{&leader, spare} {
		if c != nil && c.Close != nil {
			c.Close()
		}
	}
	return failovers
}

// awaitWaiting returns once the waiter whose Campaign reports on led
// waits behind the leader (f.Waiting, if set) and has settled
// (FailoverSettle). It fails tb if the waiter leads before the leader's
// term ends (two leaders) or does not show up in time.
func awaitWaiting(tb testing.TB, f Failover, led <-chan error) {
	ctx, cancel := context.WithTimeout(context.Background(), failoverWaitLimit)
	defer cancel()
	for f.Waiting != nil {
		ok, err := f.Waiting(ctx)
		if err != nil {
			tb.Fatalf("is a candidate waiting: %v", err)
		}
		if ok {
			break
		}
		select {
		case err := <-led:
			tb.Fatalf("the waiter's campaign returned while the leader led: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case err := <-led:
		tb.Fatalf("the waiter's campaign returned while the leader led: %v", err)
	case <-time.After(FailoverSettle):
	}
}

// killPhase waits a random time under ttl/3 (the renewal period of a
// fencelock lease), so that a leader is killed at a random point of its
// renewal period, as a process dies, not at the same point every time (the
// failovers follow each other at the pace of the TTL, which would lock the
// kill to a phase of the renewals). It fails tb if the waiter leads
// meanwhile.
func killPhase(tb testing.TB, led <-chan error, ttl time.Duration) {
	select {
	case err := <-led:
		tb.Fatalf("the waiter's campaign returned while the leader led: %v", err)
	case <-time.After(rand.N(ttl / 3)):
	}
}

func reportFailovers(b *testing.B, ds []time.Duration, end End, ttl, rtt time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50, top := Percentile(ds, 0.5), ds[len(ds)-1]
	b.ReportMetric(ms(p50), "failover-p50-ms")
	b.ReportMetric(ms(top), "failover-max-ms")
	switch {
	case end == Resign && rtt > 0:
		b.ReportMetric(float64(rtt)/float64(time.Microsecond), "rtt-us")
		b.ReportMetric(float64(p50)/float64(rtt), "failover-p50-rtt")
		b.ReportMetric(float64(top)/float64(rtt), "failover-max-rtt")
	case end == Kill && ttl > 0:
		b.ReportMetric(ms(ttl), "ttl-ms")
		b.ReportMetric(ms(p50-ttl), "minus-ttl-p50-ms")
		b.ReportMetric(ms(top-ttl), "minus-ttl-max-ms")
	}
}

// ElectionCandidate returns a candidate that campaigns through e for the
// election name with value, and resigns its term. kill must cut e's
// Locker off from its backend without releasing anything (as the
// conformance harnesses' Crash does); close, if not nil, frees the Locker
// and its client.
func ElectionCandidate(e *election.Elector, name, value string, kill, close func()) Candidate {
	var term *election.Term
	return Candidate{
		Campaign: func(ctx context.Context) (err error) {
			term, err = e.Campaign(ctx, name, value)
			return err
		},
		Resign: func(ctx context.Context) error { return term.Resign(ctx) },
		Kill:   kill,
		Close:  close,
	}
}
