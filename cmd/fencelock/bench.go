package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
)

const benchUsage = `usage: fencelock bench --url URL [flags]

Measures uncontended acquire+release latency with one client, then -c
clients contending for one lock: grants/s and the handoff time from a
release to the next grant. The code is the one the Go benchmarks run.

flags:
`

// benchReport is the --json output.
type benchReport struct {
	URL         string         `json:"url"`
	Uncontended latencyReport  `json:"uncontended"`
	Contended   contendedStats `json:"contended"`
}

type latencyReport struct {
	Ops    int     `json:"ops"`
	MeanUs float64 `json:"mean_us"`
	P50Us  float64 `json:"p50_us"`
	P99Us  float64 `json:"p99_us"`
}

type contendedStats struct {
	Contenders   int     `json:"contenders"`
	Grants       int     `json:"grants"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	HandoffP50Us float64 `json:"handoff_p50_us"`
	HandoffP99Us float64 `json:"handoff_p99_us"`
	PerContender []int   `json:"grants_per_contender"`
}

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage); fs.PrintDefaults() }
	url := fs.String("url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	n := fs.Int("n", 1000, "acquire+release cycles uncontended, and grants contended")
	c := fs.Int("c", 8, "contending clients")
	name := fs.String("lock", fmt.Sprintf("fencelock-bench-%d", os.Getpid()), "lock name")
	asJSON := fs.Bool("json", false, "print JSON instead of a report")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *url == "" || *n <= 0 || *c <= 0 || fs.NArg() != 0 {
		fs.Usage()
		return exitUsage
	}
	cs := make([]lockbench.Contender, *c)
	for i := range cs {
		l, err := backend.Open(ctx, *url)
		if err != nil {
			return report(stderr, "bench", err)
		}
		defer l.Close()
		var lease *backend.Lease
		cs[i] = lockbench.Contender{
			Lock:   func(ctx context.Context) (err error) { lease, err = l.Acquire(ctx, *name); return err },
			Unlock: func(ctx context.Context) error { return lease.Release(ctx) },
		}
	}

	bar := newProgress(stderr, "uncontended", *n)
	un, err := lockbench.RunUncontended(ctx, cs[0], 10, *n, bar.set)
	bar.done()
	if err != nil {
		return report(stderr, "bench", err)
	}
	bar = newProgress(stderr, fmt.Sprintf("contended x%d", *c), *n)
	co, err := lockbench.RunContended(ctx, cs, *n, bar.set)
	bar.done()
	if err != nil {
		return report(stderr, "bench", err)
	}

	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	rep := benchReport{
		URL: *url,
		Uncontended: latencyReport{Ops: un.Ops, MeanUs: us(lockbench.Mean(un.Total)),
			P50Us: us(lockbench.Percentile(un.Total, 0.5)), P99Us: us(lockbench.Percentile(un.Total, 0.99))},
		Contended: contendedStats{Contenders: *c, Grants: co.Grants, GrantsPerSec: co.GrantsPerSecond(),
			HandoffP50Us: us(lockbench.Percentile(co.Handoffs, 0.5)), HandoffP99Us: us(lockbench.Percentile(co.Handoffs, 0.99)),
			PerContender: co.PerContender},
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return 0
	}
	fmt.Fprintf(stdout, "uncontended acquire+release, %d ops: mean %v, p50 %v, p99 %v\n", un.Ops,
		lockbench.Mean(un.Total).Round(time.Microsecond), lockbench.Percentile(un.Total, 0.5).Round(time.Microsecond),
		lockbench.Percentile(un.Total, 0.99).Round(time.Microsecond))
	histogram(stdout, un.Total)
	fmt.Fprintf(stdout, "\ncontended, %d clients, %d grants: %.0f grants/s, handoff p50 %v, p99 %v, grants per client min %d max %d\n",
		*c, co.Grants, co.GrantsPerSecond(), lockbench.Percentile(co.Handoffs, 0.5).Round(time.Microsecond),
		lockbench.Percentile(co.Handoffs, 0.99).Round(time.Microsecond), minOf(co.PerContender), maxOf(co.PerContender))
	histogram(stdout, co.Handoffs)
	return 0
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

// progress draws a one-line progress bar on w, redrawn at most every 100ms.
// set may be called from several goroutines.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	title    string
	total    int
	last     time.Time
	finished bool
}

func newProgress(w io.Writer, title string, total int) *progress {
	return &progress{w: w, title: title, total: total}
}

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
		p.finished = done >= p.total
	}
}

func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished = true
	fmt.Fprintln(p.w)
}
