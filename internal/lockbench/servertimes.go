package lockbench

import (
	"slices"
	"testing"
	"time"
)

// ServerTimes are a backend's round trip (a request that does no work) and
// write commit, measured in the run whose handoffs they are the units of.
type ServerTimes struct {
	RTT    time.Duration // median round trip
	Commit time.Duration // median write commit
}

// MedianOf returns the median duration of n calls of req, each made after
// pause (none if zero: back to back, as the requests of a contended run
// follow each other); a failed call fails tb.
func MedianOf(tb testing.TB, n int, pause time.Duration, req func() error) time.Duration {
	tb.Helper()
	ds := make([]time.Duration, n)
	for i := range ds {
		if pause > 0 {
			time.Sleep(pause)
		}
		start := time.Now()
		if err := req(); err != nil {
			tb.Fatal(err)
		}
		ds[i] = time.Since(start)
	}
	slices.Sort(ds)
	return Percentile(ds, 0.5)
}

// Report reports on b the round trip and commit in µs (rtt-us, commit-us)
// and the p50 and p99 of handoffs (sorted) in round trips
// (handoff-p50-rtt, handoff-p99-rtt).
func (t ServerTimes) Report(b *testing.B, handoffs []time.Duration) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(t.RTT), "rtt-us")
	b.ReportMetric(us(t.Commit), "commit-us")
	b.ReportMetric(float64(Percentile(handoffs, 0.50))/float64(t.RTT), "handoff-p50-rtt")
	b.ReportMetric(float64(Percentile(handoffs, 0.99))/float64(t.RTT), "handoff-p99-rtt")
}
