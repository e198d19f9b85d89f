package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

const benchUsage = `usage: fencelock bench --url URL [flags]

Measures the backend's round trip (a Status of the free lock, the median of
100), uncontended acquire+release latency with one client, then -c clients
contending for one lock: grants/s and the handoff time from a release to
the next grant, also in round trips. With --waiters N, N waiters then queue
on one lock (through the -c clients' connections) and drain: the time from
the holder's release to the last grant, the handoffs, and whether every
grant went to the waiter the backend had queued next. The code is the one
the Go benchmarks run. A progress bar is drawn on stderr when stderr is a
terminal.

--json prints one object; keys are snake_case, durations are seconds
(float64, keys ending in _seconds), rates per second:
  {"url": "redis://127.0.0.1:6379",          (password redacted)
   "round_trip_seconds": 0.0001,
   "uncontended": {"ops": 1000, "elapsed_seconds": 0.8, "mean_seconds": 0.0008,
                   "p50_seconds": 0.0007, "p99_seconds": 0.002},
   "contended": {"contenders": 8, "grants": 1000, "elapsed_seconds": 1.2,
                 "grants_per_second": 830, "handoff_p50_seconds": 0.001,
                 "handoff_p99_seconds": 0.004, "grants_per_contender": [125, ...]},
   "queue": {"waiters": 200, "drain_seconds": 0.2, "handoff_p50_seconds": 0.001,
             "handoff_p99_seconds": 0.003, "out_of_order": 0}}   (with --waiters)

Exit status: 0 (also for -h), 64 usage error, 65 invalid URL or option,
69 backend unavailable, 77 permission denied by the backend.

flags:
`

// benchJSON is the --json output of fencelock bench.
type benchJSON struct {
	URL              string          `json:"url"` // password redacted
	RoundTripSeconds float64         `json:"round_trip_seconds"`
	Uncontended      uncontendedJSON `json:"uncontended"`
	Contended        contendedJSON   `json:"contended"`
	Queue            *queueJSON      `json:"queue,omitempty"`
}

// queueJSON is --waiters N waiters queued on one lock, drained.
type queueJSON struct {
	Waiters           int     `json:"waiters"`
	DrainSeconds      float64 `json:"drain_seconds"`
	HandoffP50Seconds float64 `json:"handoff_p50_seconds"`
	HandoffP99Seconds float64 `json:"handoff_p99_seconds"`
	OutOfOrder        int     `json:"out_of_order"`
}

// uncontendedJSON is one client's acquire+release cycles.
type uncontendedJSON struct {
	Ops            int     `json:"ops"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	MeanSeconds    float64 `json:"mean_seconds"`
	P50Seconds     float64 `json:"p50_seconds"`
	P99Seconds     float64 `json:"p99_seconds"`
}

// contendedJSON is -c clients contending for one lock.
type contendedJSON struct {
	Contenders         int     `json:"contenders"`
	Grants             int     `json:"grants"`
	ElapsedSeconds     float64 `json:"elapsed_seconds"`
	GrantsPerSecond    float64 `json:"grants_per_second"`
	HandoffP50Seconds  float64 `json:"handoff_p50_seconds"`
	HandoffP99Seconds  float64 `json:"handoff_p99_seconds"`
	GrantsPerContender []int   `json:"grants_per_contender"`
}

// benchCmd runs fencelock bench: it parses and checks the flags, opens
// the -c clients, runs the benchmarks and prints their report.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bench", benchUsage)
	url := fs.String("url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	n := fs.Int("n", 1000, "acquire+release cycles uncontended, and grants contended")
	c := fs.Int("c", 8, "contending clients")
	name := fs.String("lock", fmt.Sprintf("fencelock-bench-%d", os.Getpid()), "lock name")
	waiters := fs.Int("waiters", 0, "then queue this many waiters on one lock and drain them (0: off)")
	asJSON := fs.Bool("json", false, "print JSON instead of a report (see above)")
	connect := connectTimeoutFlag(fs)
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	switch {
	case *url == "":
		return usageErr(stderr, "bench", "no backend URL: give --url or set FENCELOCK_URL")
	case *n <= 0 || *c <= 0 || *connect <= 0:
		return usageErr(stderr, "bench", "-n, -c and --connect-timeout must be positive")
	case *waiters < 0:
		return usageErr(stderr, "bench", "--waiters must not be negative")
	case fs.NArg() != 0:
		return usageErr(stderr, "bench", fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	for _, err := range []error{backend.CheckURL(*url), backend.ValidateName(*name)} {
		if err != nil {
			return report(stderr, "bench", err)
		}
	}
	lockers, err := openBenchLockers(ctx, *url, *c, *connect)
	defer func() {
		for _, l := range slices.Backward(lockers) {
			l.Close()
		}
	}()
	if err != nil {
		return report(stderr, "bench", err)
	}
	res, err := runBench(ctx, lockers, *name, *n, *waiters, isTerminal(stderr), stderr)
	if err != nil {
		return report(stderr, "bench", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res.json(redact(*url)))
		return exitOK
	}
	res.print(stdout)
	return exitOK
}

// openBenchLockers opens c Lockers on url, each within connect. On an
// error it returns the Lockers it opened before it, for the caller to
// close.
func openBenchLockers(ctx context.Context, url string, c int, connect time.Duration) ([]*backend.Locker, error) {
	lockers := make([]*backend.Locker, 0, c)
	for range c {
		l, err := openWithin(ctx, url, connect)
		if err != nil {
			return lockers, err
		}
		lockers = append(lockers, l)
	}
	return lockers, nil
}

// benchResults is what fencelock bench measured.
type benchResults struct {
	clients int // -c
	rtt     time.Duration
	un      lockbench.Uncontended
	co      lockbench.Contended
	queue   *lockbench.Drain // nil without --waiters
}

// runBench measures, on the lock called name: the round trip, n
// uncontended cycles through the first Locker, n grants contended by all
// of them, and with waiters > 0, that many waiters queued on another lock
// and drained. It draws progress bars on stderr if draw.
func runBench(ctx context.Context, lockers []*backend.Locker, name string, n, waiters int, draw bool, stderr io.Writer) (benchResults, error) {
	res := benchResults{clients: len(lockers)}
	cs := make([]lockbench.Contender, len(lockers))
	for i, l := range lockers {
		var lease *backend.Lease
		cs[i] = lockbench.Contender{
			Lock:   func(ctx context.Context) (err error) { lease, err = l.Acquire(ctx, name); return err },
			Unlock: func(ctx context.Context) error { return lease.Release(ctx) },
		}
	}
	var err error
	if res.rtt, err = roundTrip(ctx, lockers[0], name); err != nil {
		return res, err
	}
	bar := newProgress(stderr, "uncontended", n, draw)
	res.un, err = lockbench.RunUncontended(ctx, cs[0], 10, n, bar.set)
	bar.done()
	if err != nil {
		return res, err
	}
	bar = newProgress(stderr, fmt.Sprintf("contended x%d", res.clients), n, draw)
	res.co, err = lockbench.RunContended(ctx, cs, n, bar.set)
	bar.done()
	if err != nil {
		return res, err
	}
	if waiters > 0 {
		d, err := lockbench.DrainQueue(ctx, lockers, name+"-queue", waiters)
		if err != nil {
			return res, err
		}
		res.queue = &d
	}
	return res, nil
}

// json returns the --json report of res, measured on url (redacted).
func (res benchResults) json(url string) benchJSON {
	sec := time.Duration.Seconds
	un, co := res.un, res.co
	rep := benchJSON{
		URL: url, RoundTripSeconds: sec(res.rtt),
		Uncontended: uncontendedJSON{Ops: un.Ops, ElapsedSeconds: sec(un.Elapsed), MeanSeconds: sec(lockbench.Mean(un.Total)),
			P50Seconds: sec(lockbench.Percentile(un.Total, 0.5)), P99Seconds: sec(lockbench.Percentile(un.Total, 0.99))},
		Contended: contendedJSON{Contenders: res.clients, Grants: co.Grants, ElapsedSeconds: sec(co.Elapsed),
			GrantsPerSecond:   co.GrantsPerSecond(),
			HandoffP50Seconds: sec(lockbench.Percentile(co.Handoffs, 0.5)), HandoffP99Seconds: sec(lockbench.Percentile(co.Handoffs, 0.99)),
			GrantsPerContender: co.PerContender},
	}
	if queue := res.queue; queue != nil {
		rep.Queue = &queueJSON{Waiters: queue.Waiters, DrainSeconds: sec(queue.Elapsed), OutOfOrder: queue.OutOfOrder,
			HandoffP50Seconds: sec(lockbench.Percentile(queue.Handoffs, 0.5)), HandoffP99Seconds: sec(lockbench.Percentile(queue.Handoffs, 0.99))}
	}
	return rep
}

// print writes the text report of res, with histograms, to stdout.
func (res benchResults) print(stdout io.Writer) {
	rtt, un, co, queue := res.rtt, res.un, res.co, res.queue
	inRTT := func(d time.Duration) string {
		if rtt < time.Microsecond { // in-process (mem): no network round trip to count in
			return d.Round(time.Microsecond).String()
		}
		return fmt.Sprintf("%v (%.1f round trips)", d.Round(time.Microsecond), float64(d)/float64(rtt))
	}
	fmt.Fprintf(stdout, "round trip (a Status of the free lock, median of %d): %v\n\n", roundTrips, rtt.Round(time.Microsecond))
	fmt.Fprintf(stdout, "uncontended acquire+release, %d ops: mean %v, p50 %v, p99 %v\n", un.Ops,
		lockbench.Mean(un.Total).Round(time.Microsecond), lockbench.Percentile(un.Total, 0.5).Round(time.Microsecond),
		lockbench.Percentile(un.Total, 0.99).Round(time.Microsecond))
	histogram(stdout, un.Total)
	fmt.Fprintf(stdout, "\ncontended, %d clients, %d grants: %.0f grants/s, handoff p50 %s, p99 %s, grants per client min %d max %d\n",
		res.clients, co.Grants, co.GrantsPerSecond(), inRTT(lockbench.Percentile(co.Handoffs, 0.5)),
		inRTT(lockbench.Percentile(co.Handoffs, 0.99)), minOf(co.PerContender), maxOf(co.PerContender))
	histogram(stdout, co.Handoffs)
	if queue != nil {
		order := "every grant in queue order"
		if queue.OutOfOrder > 0 {
			order = fmt.Sprintf("%d grants OUT OF QUEUE ORDER", queue.OutOfOrder)
		}
		fmt.Fprintf(stdout, "\nqueue of %d waiters: drained in %v, handoff p50 %s, p99 %s; %s\n", queue.Waiters,
			queue.Elapsed.Round(time.Microsecond), inRTT(lockbench.Percentile(queue.Handoffs, 0.5)),
			inRTT(lockbench.Percentile(queue.Handoffs, 0.99)), order)
		histogram(stdout, queue.Handoffs)
	}
}

// roundTrips is how many Status calls roundTrip times.
const roundTrips = 100

// roundTrip returns the median time of a Status of the lock called name
// (free, before the benchmark): the backend's round trip as a Locker sees
// it (etcd: one Range; ZooKeeper: one getChildren; Redis: one script), the
// unit a handoff is stated in.
func roundTrip(ctx context.Context, l *backend.Locker, name string) (time.Duration, error) {
	ds := make([]time.Duration, roundTrips)
	for i := range ds {
		t0 := time.Now()
		if _, err := l.Status(ctx, name); err != nil {
			return 0, err
		}
		ds[i] = time.Since(t0)
	}
	slices.Sort(ds)
	return lockbench.Percentile(ds, 0.5), nil
}

// histogram prints sorted durations in power-of-two buckets as bars.
func histogram(w io.Writer, sorted []time.Duration) {
	if len(sorted) == 0 {
		return
	}
	bucket := func(d time.Duration) int {
		return int(math.Floor(math.Log2(float64(max(d, time.Microsecond)) / float64(time.Microsecond))))
	}
	lo, hi := bucket(sorted[0]), bucket(sorted[len(sorted)-1])
	counts := make([]int, hi-lo+1)
	for _, d := range sorted {
		counts[bucket(d)-lo]++
	}
	peak := maxOf(counts)
	for i, n := range counts {
		from := time.Duration(1<<(lo+i)) * time.Microsecond
		fmt.Fprintf(w, "  %9v .. %-9v %6d %s\n", from, 2*from, n, strings.Repeat("█", (n*40+peak-1)/peak))
	}
}

func minOf(xs []int) int {
	m := math.MaxInt
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// isTerminal reports whether w is a terminal: a character device other
// than the null device. A pipe, a file, /dev/null or any other io.Writer is
// not.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}

// progress draws a one-line progress bar on w, redrawn at most every 100ms,
// if draw is set (w is a terminal); otherwise it draws nothing. set may be
// called from several goroutines.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	title    string
	total    int
	last     time.Time
	finished bool
	drawn    bool
}

func newProgress(w io.Writer, title string, total int, draw bool) *progress {
	return &progress{w: w, title: title, total: total, finished: !draw}
}

// set redraws the bar for done of total.
func (p *progress) set(done int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond || done >= p.total {
		p.last = now
		filled := min(done*30/p.total, 30)
		fmt.Fprintf(p.w, "\r%-14s [%s%s] %d/%d", p.title, strings.Repeat("#", filled), strings.Repeat(".", 30-filled), min(done, p.total), p.total)
		p.drawn = true
		p.finished = done >= p.total
	}
}

// done ends the bar's line, if one was drawn.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished = true
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
