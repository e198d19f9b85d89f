// Package benchreport turns the output of every backend's benchmarks beside
// their anchors (go test -bench, one file per backend, written by
// scripts/bench) into one Markdown table and one SVG chart.
//
// The benchmarks run their implementations in alternating rounds
// (lockbench.Interleave: sub-benchmarks round=R/impl=NAME); the report
// pools the rounds of each implementation, as benchstat -col /impl -ignore
// /round does, with the same libraries: golang.org/x/perf/benchfmt reads
// the files, benchproc groups the results by benchmark and impl, and
// benchmath gives each sample's median with its 95% confidence interval
// and compares fencelock with each anchor with a Mann-Whitney U test.
//
// Rows: per backend, the uncontended acquire+release (BenchmarkUncontended:
// acquire-us + release-us), the 8-way grants/s and handoff p50 and p99
// (BenchmarkContended8), then any other metric those two benchmarks
// report, whatever it is. A file of the Redis Cluster benchmarks
// (BenchmarkClusterContended and BenchmarkClusterHandoff: see
// clusterRows) has rows of its own. The round trip (RTT) of a backend is the median
// of its BenchmarkRoundTrip, or else of an rtt-us metric; without either it
// is not measured. The file's configuration lines (benchfmt's "key: value"
// lines: go test's cpu, and the commit, date, rounds, nproc, benchtime and
// duration that scripts/bench writes) describe the run.
package benchreport

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
	"golang.org/x/perf/benchproc"
)

// Fencelock is the impl name of this project's lock in the benchmarks; the
// other impls of a backend are its anchors.
const Fencelock = "fencelock"

// The benchmarks the report reads (base names, without "Benchmark").
const (
	benchUncontended = "Uncontended"
	benchContended   = "Contended8"
	benchRoundTrip   = "RoundTrip"
	// The Redis Cluster's: sub-benchmarks masters=N (fencelock and its
	// anchor on a cluster of N masters) and topology=T (fencelock only:
	// single, cluster, cluster-bus).
	benchClusterContended = "ClusterContended"
	benchClusterHandoff   = "ClusterHandoff"
)

// unitSeconds is the unit of latency samples after reading: a metric
// reported in -ns, -us, -ms or -s (or go test's sec/op) is kept in seconds.
const unitSeconds = "s"

// Backend is one backend's benchmark file.
type Backend struct {
	// Name is the file's name without its extension (etcd, zookeeper,
	// redis, floor).
	Name string
	// Impls are the implementations measured, fencelock first, then the
	// anchors in the order they first appear.
	Impls []string
	// Config holds the file's configuration lines (cpu, commit, date...).
	Config map[string]string
	// GOMAXPROCS is the suffix of the benchmark names ("" if none).
	GOMAXPROCS string
	// RTT is the median round trip in seconds, with its confidence
	// interval; nil when not measured.
	RTT *benchmath.Summary

	samples map[sampleKey][]float64
	metrics []metric // in the order first seen
}

// sampleKey names the samples of one measure: bench is the benchmark's
// base name followed by its sub-benchmark keys other than round and impl
// ("ClusterContended/masters=2").
type sampleKey struct {
	bench, impl, unit string
}

// metric is one value a benchmark reports, in the unit the samples keep.
type metric struct {
	bench, unit string
}

// Stat is one implementation's sample of one measure.
type Stat struct {
	Impl    string            // the implementation measured (Backend.Impls)
	Summary benchmath.Summary // Center is the median
	sample  *benchmath.Sample
}

// Ratio compares fencelock with one anchor on one measure.
type Ratio struct {
	// Anchor is the implementation fencelock is compared with.
	Anchor string
	// Value is fencelock's median over the anchor's.
	Value float64
	// Comparison holds the Mann-Whitney U test's p-value and sample sizes.
	Comparison benchmath.Comparison
}

// Significant reports whether the two samples differ at the comparison's
// alpha (0.05), as benchstat decides it.
func (r Ratio) Significant() bool { return r.Comparison.P < r.Comparison.Alpha }

// Row is one measure of one backend.
type Row struct {
	// Backend is the backend measured.
	Backend *Backend
	// Label says what is measured; Unit is the unit of the values ("s" for
	// latencies, in seconds).
	Label, Unit string
	// Latency marks the rows the chart draws as latencies beside the RTT.
	Latency bool
	// Stats are fencelock's (if measured) then each anchor's.
	Stats []Stat
	// Ratios are fencelock/anchor, one per anchor, when fencelock was
	// measured too.
	Ratios []Ratio
}

// Stat returns impl's statistic in the row, if it was measured.
func (r Row) Stat(impl string) (Stat, bool) {
	for _, s := range r.Stats {
		if s.Impl == impl {
			return s, true
		}
	}
	return Stat{}, false
}

// Report is what the files hold, row by row.
type Report struct {
	Backends []*Backend // one per file
	Rows     []Row      // every backend's measures
}

// Read reads one go test -bench output file per backend, in the order
// given, and computes the report. A file without BenchmarkUncontended and
// BenchmarkContended8 results, or with a line benchfmt cannot parse, is an
// error.
func Read(paths ...string) (*Report, error) {
	if len(paths) == 0 {
		return nil, errors.New("benchreport: no benchmark files")
	}
	rep := &Report{}
	for _, p := range paths {
		b, err := readBackend(p)
		if err != nil {
			return nil, err
		}
		rep.Backends = append(rep.Backends, b)
		rep.Rows = append(rep.Rows, b.rows()...)
	}
	return rep, nil
}

func readBackend(path string) (*Backend, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := &Backend{
		Name:    strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)),
		Config:  map[string]string{},
		samples: map[sampleKey][]float64{},
	}
	var parser benchproc.ProjectionParser
	byName, err := parser.Parse(".name", nil)
	if err != nil {
		return nil, err
	}
	byImpl, err := parser.Parse("/impl", nil)
	if err != nil {
		return nil, err
	}
	nameField, implField := byName.Fields()[0], byImpl.Fields()[0]
	r := benchfmt.NewReader(f, path)
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.SyntaxError:
			return nil, fmt.Errorf("benchreport: %w", rec)
		case *benchfmt.Result:
			for _, c := range rec.Config {
				b.Config[c.Key] = string(c.Value)
			}
			_, parts := rec.Name.Parts()
			if len(parts) > 0 && strings.HasPrefix(string(parts[len(parts)-1]), "-") {
				b.GOMAXPROCS = strings.TrimPrefix(string(parts[len(parts)-1]), "-")
			}
			bench := byName.Project(rec).Get(nameField)
			for _, part := range parts {
				if p := string(part); strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "/round=") && !strings.HasPrefix(p, "/impl=") {
					bench += p
				}
			}
			impl := byImpl.Project(rec).Get(implField)
			b.add(bench, impl, rec)
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	required := []string{benchUncontended, benchContended}
	if b.cluster() {
		required = []string{benchClusterContended, benchClusterHandoff}
	}
	for _, bench := range required {
		if !slices.ContainsFunc(b.metrics, func(m metric) bool { return baseName(m.bench) == bench }) {
			return nil, fmt.Errorf("benchreport: %s: no Benchmark%s results", path, bench)
		}
	}
	b.RTT = b.roundTrip()
	slices.SortStableFunc(b.Impls, func(x, y string) int {
		switch {
		case x == y:
			return 0
		case x == Fencelock:
			return -1
		case y == Fencelock:
			return 1
		}
		return 0
	})
	return b, nil
}

// add keeps the values of one result line, latencies in seconds, and the
// acquire+release sum of an uncontended one.
func (b *Backend) add(bench, impl string, res *benchfmt.Result) {
	if impl != "" && bench != benchRoundTrip && !slices.Contains(b.Impls, impl) {
		b.Impls = append(b.Impls, impl)
	}
	keep := func(unit string, v float64) {
		k := sampleKey{bench, impl, unit}
		if _, seen := b.samples[k]; !seen && !slices.Contains(b.metrics, metric{bench, unit}) {
			b.metrics = append(b.metrics, metric{bench, unit})
		}
		b.samples[k] = append(b.samples[k], v)
	}
	for _, v := range res.Values {
		unit, value := v.Unit, v.Value
		if name, scale, ok := timeUnit(unit); ok {
			unit, value = name, value*scale
		}
		keep(unit, value)
	}
	acquire, ok1 := res.Value("acquire-us")
	release, ok2 := res.Value("release-us")
	if ok1 && ok2 {
		keep(acquireRelease, (acquire+release)*1e-6)
	}
}

// acquireRelease is the unit of the uncontended acquire+release samples,
// in seconds.
const acquireRelease = "acquire+release-" + unitSeconds

// timeUnit returns the name a latency metric is kept under (its unit with
// the time suffix replaced by "-s"; go test's sec/op stays sec/op) and the
// factor from its unit to seconds.
func timeUnit(unit string) (name string, toSeconds float64, ok bool) {
	if unit == "sec/op" {
		return unit, 1, true
	}
	for _, suffix := range []struct {
		s     string
		scale float64
	}{{"-ns", 1e-9}, {"-us", 1e-6}, {"-ms", 1e-3}, {"-s", 1}} {
		if base, found := strings.CutSuffix(unit, suffix.s); found {
			return base + "-" + unitSeconds, suffix.scale, true
		}
	}
	return "", 0, false
}

// roundTrip summarizes BenchmarkRoundTrip's time per op (for the Redis
// Cluster, the rtt-us of BenchmarkClusterHandoff on the cluster), or else
// an rtt-us metric of any benchmark; nil when there is neither.
func (b *Backend) roundTrip() *benchmath.Summary {
	var values, metricValues []float64
	for k, v := range b.samples {
		switch {
		case k.bench == benchRoundTrip && k.unit == "sec/op":
			values = append(values, v...)
		case b.cluster() && k.bench == benchClusterHandoff+"/topology=cluster" && k.unit == "rtt-"+unitSeconds:
			// The unit of the cluster's handoffs: a PING to the lock's
			// master, after a pause as each handoff has.
			values = append(values, v...)
		case k.unit == "rtt-"+unitSeconds:
			metricValues = append(metricValues, v...)
		}
	}
	if len(values) == 0 {
		values = metricValues
	}
	if len(values) == 0 {
		return nil
	}
	s := summarize(values)
	return &s
}

func summarize(values []float64) benchmath.Summary {
	return benchmath.AssumeNothing.Summary(benchmath.NewSample(values, &benchmath.DefaultThresholds), 0.95)
}

// measure is one row the report always has, if the backend reports it.
type measure struct {
	bench, unit, label string
	latency            bool
}

// measures are the report's main rows, in order; the metrics they use or
// make redundant are skipped among the other rows.
var measures = []measure{
	{benchUncontended, acquireRelease, "uncontended acquire+release", true},
	{benchContended, "grants/s", "8-way grants/s", false},
	{benchContended, "handoff-p50-" + unitSeconds, "8-way handoff p50", true},
	{benchContended, "handoff-p99-" + unitSeconds, "8-way handoff p99", true},
}

// skipped are metrics the main rows already show: the parts of
// acquire+release, and sec/op (the inverse of grants/s when contended).
var skipped = []string{"acquire-" + unitSeconds, "release-" + unitSeconds, "sec/op"}

// benchLabels name the benchmarks in the labels of the other rows.
var benchLabels = map[string]string{benchUncontended: "uncontended", benchContended: "8-way"}

// baseName is bench without its sub-benchmark keys.
func baseName(bench string) string {
	base, _, _ := strings.Cut(bench, "/")
	return base
}

// cluster reports whether the file holds the Redis Cluster benchmarks.
func (b *Backend) cluster() bool {
	return slices.ContainsFunc(b.metrics, func(m metric) bool { return baseName(m.bench) == benchClusterContended })
}

// rows returns the backend's main rows, then one per other metric of its
// uncontended and contended benchmarks.
func (b *Backend) rows() []Row {
	if b.cluster() {
		return b.clusterRows()
	}
	var rows []Row
	for _, m := range measures {
		if r, ok := b.row(m.bench, m.unit, m.label, m.latency); ok {
			rows = append(rows, r)
		}
	}
	for _, m := range b.metrics {
		label, ok := benchLabels[m.bench]
		if !ok || slices.Contains(skipped, m.unit) || slices.ContainsFunc(measures, func(x measure) bool { return x.bench == m.bench && x.unit == m.unit }) {
			continue
		}
		unit := m.unit
		if base, isTime := strings.CutSuffix(unit, "-"+unitSeconds); isTime {
			label, unit = label+" "+base, unitSeconds
		} else {
			label += " " + unit
		}
		if r, ok := b.row(m.bench, m.unit, label, false); ok {
			r.Unit = unit
			rows = append(rows, r)
		}
	}
	return rows
}

func (b *Backend) row(bench, unit, label string, latency bool) (Row, bool) {
	keys := make([]sampleKey, len(b.Impls))
	for i, impl := range b.Impls {
		keys[i] = sampleKey{bench, impl, unit}
	}
	return b.rowOf(keys, b.Impls, unit, label, latency)
}

// rowOf is the row of the samples keys, shown as the implementations impls
// (fencelock, if measured, first).
func (b *Backend) rowOf(keys []sampleKey, impls []string, unit, label string, latency bool) (Row, bool) {
	r := Row{Backend: b, Label: label, Unit: unit, Latency: latency}
	if latency || strings.HasSuffix(unit, "-"+unitSeconds) {
		r.Unit = unitSeconds
	}
	for i, k := range keys {
		values := b.samples[k]
		if len(values) == 0 {
			continue
		}
		sample := benchmath.NewSample(values, &benchmath.DefaultThresholds)
		r.Stats = append(r.Stats, Stat{Impl: impls[i], Summary: benchmath.AssumeNothing.Summary(sample, 0.95), sample: sample})
	}
	if len(r.Stats) == 0 {
		return Row{}, false
	}
	if own, ok := r.Stat(Fencelock); ok {
		for _, anchor := range r.Stats[1:] {
			r.Ratios = append(r.Ratios, Ratio{
				Anchor:     anchor.Impl,
				Value:      own.Summary.Center / anchor.Summary.Center,
				Comparison: benchmath.AssumeNothing.Compare(anchor.sample, own.sample),
			})
		}
	}
	return r, true
}

// clusterRows are the rows of the Redis Cluster benchmarks: for each
// cluster size, fencelock beside its anchor over many locks at once
// (BenchmarkClusterContended: grants/s, round trips per grant, the
// busiest master's CPU per grant, the client's); then one handoff at a
// time (BenchmarkClusterHandoff), fencelock on the cluster beside
// fencelock on a single server and on the cluster without local
// subscriptions (impls "single" and "cluster-bus"): p50, p99 and the
// servers' CPU per handoff.
func (b *Backend) clusterRows() []Row {
	var sizes []string
	for _, m := range b.metrics {
		if v, ok := strings.CutPrefix(m.bench, benchClusterContended+"/masters="); ok && !slices.Contains(sizes, v) {
			sizes = append(sizes, v)
		}
	}
	slices.SortFunc(sizes, func(x, y string) int { return cmpNumeric(x, y) })
	var rows []Row
	add := func(r Row, ok bool) {
		if ok {
			rows = append(rows, r)
		}
	}
	for _, n := range sizes {
		bench := benchClusterContended + "/masters=" + n
		name := n + " masters"
		if n == "1" {
			name = "1 master"
		}
		add(b.row(bench, "grants/s", name+": many locks, grants/s", false))
		add(b.row(bench, "requests/grant", name+": requests/grant", false))
		add(b.row(bench, "busiest-server-cpu-"+unitSeconds, name+": busiest master's CPU/grant", false))
		add(b.row(bench, "client-cpu-"+unitSeconds, name+": client CPU/grant", false))
	}
	topology := func(t string) sampleKey {
		return sampleKey{bench: benchClusterHandoff + "/topology=" + t, impl: Fencelock}
	}
	for _, m := range []struct{ unit, label string }{
		{"handoff-p50-" + unitSeconds, "handoff p50"},
		{"handoff-p99-" + unitSeconds, "handoff p99"},
		{"server-cpu-" + unitSeconds, "servers' CPU/handoff"},
	} {
		keys := []sampleKey{topology("cluster"), topology("single"), topology("cluster-bus")}
		for i := range keys {
			keys[i].unit = m.unit
		}
		add(b.rowOf(keys, []string{Fencelock, "single", "cluster-bus"}, m.unit, "cluster vs single server: "+m.label, false))
	}
	return rows
}

// cmpNumeric orders decimal numbers in strings by value.
func cmpNumeric(x, y string) int {
	if len(x) != len(y) {
		return len(x) - len(y)
	}
	return strings.Compare(x, y)
}
