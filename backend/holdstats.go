package backend

import (
	"container/list"
	"fmt"
	"math"
	"sync"
	"time"
)

// HoldTimes are the hold times of one lock name seen by a Locker: how long
// its leases were held, from grant to release or loss (Locker.HoldTimes).
// Percentiles are estimated by a HoldHistogram: never below the true value,
// at most 19% above it (above 1ms; below, within 1ms), and never above Max.
type HoldTimes struct {
	Count uint64        // holds measured
	Max   time.Duration // the longest, exact
	P50   time.Duration // the median
	P99   time.Duration // 99th percentile
	P999  time.Duration // 99.9th percentile
}

// holdStatsNames bounds the names a Locker keeps hold times for.
const holdStatsNames = 1024

// Histogram of one name: bucket 0 holds [0, 1ms), bucket i >= 1 holds
// [1ms * g^(i-1), 1ms * g^i) with g = 2^(1/4), the last bucket everything
// from 1ms * g^(holdBuckets-2) (about 6 hours) on.
const (
	holdBuckets     = 100
	holdBucketsPer2 = 4 // buckets per doubling
	holdBucketMin   = time.Millisecond
)

// HoldHistogram accumulates hold times in bounded memory (about 450
// bytes) and estimates their percentiles: the computation behind
// Locker.HoldTimes, which fencelock advise and status --watch use too for
// the holds they measure from outside, so that both report the same
// figures for the same holds. The zero value is empty and ready to use. It
// is not safe for concurrent use.
type HoldHistogram struct {
	count  uint64
	max    time.Duration
	counts [holdBuckets]uint32
}

// Add adds a hold of d.
func (h *HoldHistogram) Add(d time.Duration) {
	h.count++
	h.max = max(h.max, d)
	h.counts[bucketOf(d)]++
}

// Times returns the count, the exact maximum and the estimated
// percentiles of the holds added (see HoldTimes); the zero HoldTimes if
// none were.
func (h *HoldHistogram) Times() HoldTimes {
	if h.count == 0 {
		return HoldTimes{}
	}
	return HoldTimes{Count: h.count, Max: h.max, P50: h.quantile(0.5), P99: h.quantile(0.99), P999: h.quantile(0.999)}
}

// holdHist is the hold times of one name.
type holdHist struct {
	name string
	HoldHistogram
}

// holdStats is a Locker's hold times per name, for at most limit names:
// recording a name beyond them forgets the name recorded least recently.
type holdStats struct {
	mu    sync.Mutex
	limit int
	names map[string]*list.Element // of *holdHist, in lru
	lru   list.List                // most recently recorded first
}

func newHoldStats(limit int) *holdStats {
	return &holdStats{limit: limit, names: make(map[string]*list.Element)}
}

// bucketOf returns the bucket of a hold of d.
func bucketOf(d time.Duration) int {
	if d < holdBucketMin {
		return 0
	}
	b := min(1+int(math.Floor(holdBucketsPer2*math.Log2(float64(d)/float64(holdBucketMin)))), holdBuckets-1)
	// Log2 and Exp2 may round apart at a bound: the bucket is the one
	// whose bounds, as bucketBounds computes them, hold d.
	switch lo, hi := bucketBounds(b); {
	case float64(d) < lo:
		b--
	case float64(d) >= hi:
		b++
	}
	return b
}

// bucketBounds returns the bounds of bucket b: [lo, hi), hi infinite (the
// largest Duration) for the last.
func bucketBounds(b int) (lo, hi float64) {
	if b == 0 {
		return 0, float64(holdBucketMin)
	}
	lo = float64(holdBucketMin) * math.Exp2(float64(b-1)/holdBucketsPer2)
	if b == holdBuckets-1 {
		return lo, math.MaxInt64
	}
	return lo, float64(holdBucketMin) * math.Exp2(float64(b)/holdBucketsPer2)
}

// record adds a hold of d to name's hold times. It allocates only for a
// name it has not kept yet, and reuses the forgotten name's memory once
// it keeps limit names.
func (s *holdStats) record(name string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.names[name]
	switch {
	case ok:
		s.lru.MoveToFront(e)
	case len(s.names) >= s.limit:
		e = s.lru.Back()
		h := e.Value.(*holdHist)
		delete(s.names, h.name)
		*h = holdHist{name: name}
		s.names[name] = e
		s.lru.MoveToFront(e)
	default:
		e = s.lru.PushFront(&holdHist{name: name})
		s.names[name] = e
	}
	e.Value.(*holdHist).Add(d)
}

// get returns name's hold times, and false if none are kept.
func (s *holdStats) get(name string) (HoldTimes, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.names[name]
	if !ok {
		return HoldTimes{}, false
	}
	return e.Value.(*holdHist).Times(), true
}

// quantile estimates the q-quantile: the upper bound of the bucket of the
// hold of rank ceil(q*count), at most max, so that it is never below the
// true value (a TTL advised from it covers the holds it counts) and is the
// exact max when that hold lies in the max's bucket.
func (h *HoldHistogram) quantile(q float64) time.Duration {
	rank := uint64(math.Ceil(q * float64(h.count)))
	var seen uint64
	for b, n := range h.counts {
		seen += uint64(n)
		if seen < rank || n == 0 {
			continue
		}
		if b == holdBuckets-1 {
			return h.max
		}
		_, hi := bucketBounds(b)
		return min(time.Duration(math.Ceil(hi)), h.max)
	}
	return h.max
}

// HoldTimes returns the hold times of the leases of lock name that this
// Locker granted and that have ended (released or lost), and false if it
// keeps none. A Locker keeps them in bounded memory (about 0.5 KB per
// name) for the 1,024 names it ended a hold of most recently: a name
// beyond them makes it forget the least recently ended one. They are kept
// whether telemetry is on or off, and feed AdviseTTL.
func (l *Locker) HoldTimes(name string) (HoldTimes, bool) { return l.holds.get(name) }

// TTLAdvice is a TTL recommended by AdviseTTL, with its parts.
type TTLAdvice struct {
	TTL         time.Duration // the recommended TTL; 0 if there were no holds
	Hold        time.Duration // the p99.9 hold it covers
	Headroom    time.Duration // the renewal headroom it adds
	Drift       time.Duration // the drift margin the Locker will take off it (WithDriftMargin's default)
	Explanation string        // one line: how TTL was reached
}

// AdviseTTL recommends a TTL for a lock whose holds h were measured
// (Locker.HoldTimes): long enough that a holder that never renews finishes
// 99.9% of its holds before its local deadline, with headroom to spare for
// a renewal (a round trip to the backend, and a retry, say 500ms on a
// local network), that is the p99.9 hold + headroom + the default drift
// margin (WithDriftMargin), rounded up to whole seconds (etcd counts
// whole seconds; to whole milliseconds under 1s). With auto-renew on, the
// TTL is also how long a crashed holder blocks others, so no larger one is
// worth having. It returns TTL 0 if h holds no hold.
func AdviseTTL(h HoldTimes, headroom time.Duration) TTLAdvice {
	a := TTLAdvice{Hold: h.P999, Headroom: max(headroom, 0)}
	if h.Count == 0 {
		a.Explanation = "no holds measured: no TTL to advise"
		return a
	}
	// The deadline is TTL - drift with drift = min(TTL/100+5ms, TTL/10)
	// (resolve): solve TTL - drift >= need for the smallest TTL.
	need := a.Hold + a.Headroom
	ttl := time.Duration(math.Ceil(float64(need+5*time.Millisecond) / 0.99))
	if ttl < 56*time.Millisecond { // where TTL/10 is the smaller margin
		ttl = max(time.Duration(math.Ceil(float64(need)/0.9)), time.Millisecond)
	}
	unit, what := time.Millisecond, "milliseconds"
	if ttl > time.Second {
		unit, what = time.Second, "seconds"
	}
	a.TTL = (ttl + unit - 1) / unit * unit
	a.Drift = driftOf(a.TTL)
	a.Explanation = fmt.Sprintf("TTL %v: p99.9 hold %v (of %d holds, max %v) + renewal headroom %v + drift margin %v, rounded up to whole %s",
		a.TTL, a.Hold.Round(time.Millisecond), h.Count, h.Max.Round(time.Millisecond), a.Headroom, a.Drift, what)
	return a
}

// driftOf is the default drift margin a Locker takes off ttl (resolve).
func driftOf(ttl time.Duration) time.Duration { return min(ttl/100+5*time.Millisecond, ttl/10) }

// AdviseTTL is the package's AdviseTTL fitted to this Locker's backend: a
// TTL under the backend's minimum, or under the least a server with default
// settings takes (etcd: 2s, ZooKeeper: 4s), is raised to it, and one the
// backend cannot honour (etcd counts whole seconds) is rounded up to whole
// seconds, so that the advice can be passed to WithTTL as it is. The
// exceptions are ZooKeeper's: over a caller's connection the session
// timeout is fixed, and a server grants no more than its
// maxSessionTimeout (40s by default). The explanation says when the
// advice was raised or rounded.
func (l *Locker) AdviseTTL(h HoldTimes, headroom time.Duration) TTLAdvice {
	a := AdviseTTL(h, headroom)
	if a.TTL == 0 {
		return a
	}
	switch least := max(l.caps.MinTTL, l.caps.DefaultServerMinTTL); {
	case a.TTL >= least:
	case least == l.caps.MinTTL:
		a.TTL = least
		a.Explanation += fmt.Sprintf(", raised to the %s minimum of %v", l.caps.Name, least)
	default:
		a.TTL = least
		a.Explanation += fmt.Sprintf(", raised to %v, the least that %s servers with default settings take", least, l.caps.Name)
	}
	if err := l.drv.CheckTTL(a.TTL); err != nil {
		if up := (a.TTL + time.Second - 1) / time.Second * time.Second; l.drv.CheckTTL(up) == nil {
			a.TTL = up
			a.Explanation += fmt.Sprintf(", rounded up to %v (%v)", up, err)
		}
	}
	if d := driftOf(a.TTL); d != a.Drift {
		a.Drift = d
		a.Explanation += fmt.Sprintf(" (drift margin then %v)", d)
	}
	return a
}
