package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencelock/fencelock/backend"
)

const adviseUsage = `usage: fencelock advise --url URL [--duration D] [--interval D] [--json] NAME

Measures the hold times of the lock NAME from outside, whoever takes it,
and recommends a TTL for it (Locker.AdviseTTL): the p99.9 hold + renewal
headroom (--headroom) + the drift margin, explained in one line, and no
less than the backend takes (etcd: 2s, what a default server takes).
Flags may also follow NAME.

It asks the backend who holds NAME every --interval for --duration (or
until SIGINT/SIGTERM, which ends the measuring early). A grant is a holder
appearing; its hold ends when that holder is gone. Only holds whose start
and end were both seen count, each at its longest possible length: from
the last poll before it was seen to the poll that saw it end, so a hold is
never counted shorter than it was (at most one --interval longer). Holds
shorter than --interval may be missed: keep --interval well below them.
The percentiles are computed as Locker.HoldTimes computes its own (never
below the true value, at most 19% above it, never above the max, which is
exact), so both give the same figures for the same holds.

--json prints one object; durations are seconds (float64, keys ending in
_seconds); "ttl_seconds" is null when there is no advice:
  {"name": "job", "holds": 42, "measured_seconds": 60, "interval_seconds": 0.05,
   "p50_seconds": 0.15, "p99_seconds": 0.3, "p999_seconds": 0.3,
   "max_seconds": 0.3, "ttl_seconds": 2, "headroom_seconds": 0.5,
   "drift_seconds": 0.025, "explanation": "TTL 2s: ..."}

Exit status: 0 advice given (also for -h), 1 too few holds seen (fewer
than --min-holds): no advice, 64 usage error, 65 invalid URL or name,
69 backend unavailable, 77 permission denied by the backend.

flags:
`

// adviseJSON is the --json output of fencelock advise.
type adviseJSON struct {
	Name            string   `json:"name"`
	Holds           uint64   `json:"holds"`
	MeasuredSeconds float64  `json:"measured_seconds"`
	IntervalSeconds float64  `json:"interval_seconds"`
	P50Seconds      float64  `json:"p50_seconds"`
	P99Seconds      float64  `json:"p99_seconds"`
	P999Seconds     float64  `json:"p999_seconds"`
	MaxSeconds      float64  `json:"max_seconds"`
	TTLSeconds      *float64 `json:"ttl_seconds"` // null: too few holds
	HeadroomSeconds float64  `json:"headroom_seconds"`
	DriftSeconds    float64  `json:"drift_seconds"`
	Explanation     string   `json:"explanation"`
}

func adviseCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("advise", adviseUsage)
	url := fs.String("url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	duration := fs.Duration("duration", time.Minute, "measure for this long")
	interval := fs.Duration("interval", 50*time.Millisecond, "ask who holds the lock this often")
	headroom := fs.Duration("headroom", 500*time.Millisecond, "renewal headroom added to the p99.9 hold")
	minHolds := fs.Int("min-holds", 10, "advise only after seeing this many holds (status 1 otherwise)")
	asJSON := fs.Bool("json", false, "print JSON (see above)")
	connectTimeout := connectTimeoutFlag(fs)
	names, code, ok := parseInterspersed(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	switch {
	case *url == "":
		return usageErr(stderr, "advise", "no backend URL: give --url or set FENCELOCK_URL")
	case len(names) != 1:
		return usageErr(stderr, "advise", "give one lock name")
	case *duration <= 0, *interval <= 0, *connectTimeout <= 0:
		return usageErr(stderr, "advise", "--duration, --interval and --connect-timeout must be positive")
	case *headroom < 0:
		return usageErr(stderr, "advise", "--headroom must not be negative")
	case *minHolds < 1:
		return usageErr(stderr, "advise", "--min-holds must be at least 1")
	}
	name := names[0]
	for _, err := range []error{backend.CheckURL(*url), backend.ValidateName(name)} {
		if err != nil {
			return report(stderr, "advise", err)
		}
	}
	locker, err := openWithin(ctx, *url, *connectTimeout)
	if err != nil {
		return report(stderr, "advise", err)
	}
	defer locker.Close()
	start := time.Now()
	h, err := measureHolds(ctx, locker, name, *duration, *interval)
	if err != nil {
		return report(stderr, "advise", err)
	}
	a := locker.AdviseTTL(h, *headroom)
	enough := h.Count >= uint64(*minHolds)
	if !enough {
		a.TTL = 0
		a.Explanation = fmt.Sprintf("too few holds seen: %d of the %d needed; measure longer (--duration) or more often (--interval)", h.Count, *minHolds)
	}
	if *asJSON {
		out := adviseJSON{
			Name: name, Holds: h.Count, MeasuredSeconds: time.Since(start).Seconds(), IntervalSeconds: interval.Seconds(),
			P50Seconds: h.P50.Seconds(), P99Seconds: h.P99.Seconds(), P999Seconds: h.P999.Seconds(), MaxSeconds: h.Max.Seconds(),
			HeadroomSeconds: a.Headroom.Seconds(), DriftSeconds: a.Drift.Seconds(), Explanation: a.Explanation,
		}
		if enough {
			s := a.TTL.Seconds()
			out.TTLSeconds = &s
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	} else {
		fmt.Fprintf(stdout, "lock %q: %d holds seen in %v (polled every %v)\n", name, h.Count, time.Since(start).Round(time.Millisecond), *interval)
		if h.Count > 0 {
			fmt.Fprintf(stdout, "hold times: %s\n", holdTimesText(h))
		}
		if enough {
			fmt.Fprintf(stdout, "recommended TTL: %v\n", a.TTL)
		}
		fmt.Fprintln(stdout, a.Explanation)
	}
	if !enough {
		return exitFailure
	}
	return exitOK
}

// measureHolds polls the holder of lock name every interval for d, or until
// ctx ends, and returns the hold times of the holds it saw (holdWatcher). A
// failed poll ends the measuring with its error.
func measureHolds(ctx context.Context, l *backend.Locker, name string, d, interval time.Duration) (backend.HoldTimes, error) {
	end := time.Now().Add(d)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var w holdWatcher
	for {
		// A signal ends the measuring, not the poll under way.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		polled := time.Now()
		st, err := l.Status(pctx, name)
		cancel()
		if err != nil {
			return backend.HoldTimes{}, err
		}
		w.observe(polled, st)
		if !time.Now().Before(end) {
			return w.times(), nil
		}
		select {
		case <-ctx.Done():
			return w.times(), nil
		case <-ticker.C:
		}
	}
}

// holdWatcher measures the holds of one lock from outside, from a series
// of reads of its status (advise, status --watch). A grant is a holder
// appearing; its hold ends when that holder (the same acquisition and
// token) is gone. Only holds whose start and end were both seen count, each
// at its longest possible length: from the last read before it was seen to
// the read that saw it end, so a hold is never counted shorter than it was
// (at most one poll interval longer). A failed read (failed) is a gap: a
// holder that is gone across it, and the next one, are not counted.
type holdWatcher struct {
	holder string    // the acquisition holding at the last read; "" if none
	from   time.Time // the read before holder was first seen; zero if its start was not seen
	last   time.Time // the last read; zero before the first and after a failed one
	holds  backend.HoldHistogram
}

// observe feeds w the status st, read at polled.
func (w *holdWatcher) observe(polled time.Time, st backend.Status) {
	now := ""
	if st.Holder != nil {
		now = st.Holder.ID + "\x00" + st.Holder.Token.String()
	}
	if now != w.holder {
		if w.holder != "" && !w.from.IsZero() && !w.last.IsZero() {
			w.holds.Add(polled.Sub(w.from))
		}
		w.holder, w.from = now, time.Time{}
		if now != "" {
			w.from = w.last
		}
	}
	w.last = polled
}

// failed tells w that a read failed.
func (w *holdWatcher) failed() { w.last = time.Time{} }

// times returns the statistics of the holds seen, computed as
// Locker.HoldTimes computes its own (backend.HoldHistogram), so that the
// advice from outside and the Locker's agree on the same holds.
func (w *holdWatcher) times() backend.HoldTimes { return w.holds.Times() }

// holdTimesText formats the percentiles of h for the text output, in
// milliseconds: "p50 150ms, p99 300ms, p99.9 300ms, max 300ms".
func holdTimesText(h backend.HoldTimes) string {
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v, p99 %v, p99.9 %v, max %v", ms(h.P50), ms(h.P99), ms(h.P999), ms(h.Max))
}
