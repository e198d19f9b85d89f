package benchreport_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/benchreport"
)

// testdata holds real output of scripts/bench's commands, 4 rounds, with
// the configuration lines the script writes; etcd's has no
// BenchmarkRoundTrip.
var testFiles = []string{"testdata/etcd.txt", "testdata/redis.txt", "testdata/floor.txt"}

func readTestdata(t *testing.T) *benchreport.Report {
	rep, err := benchreport.Read(testFiles...)
	require.NoError(t, err)
	return rep
}

func row(t *testing.T, rep *benchreport.Report, backend, label string) benchreport.Row {
	for _, r := range rep.Rows {
		if r.Backend.Name == backend && r.Label == label {
			return r
		}
	}
	t.Fatalf("no row %s %q", backend, label)
	return benchreport.Row{}
}

// The medians below are worked out by hand from the files: with 4 rounds
// each, the mean of the middle two.
func TestRatios(t *testing.T) {
	rep := readTestdata(t)
	require.Len(t, rep.Backends, 3)
	assert.Equal(t, []string{"fencelock", "mutex"}, rep.Backends[0].Impls)
	assert.Equal(t, []string{"fencelock", "redislock", "redsync"}, rep.Backends[1].Impls)
	assert.Equal(t, []string{"sync.Mutex"}, rep.Backends[2].Impls)

	// acquire-us + release-us per round: fencelock 1356.9 1366.6 1397.5
	// 1357.8, mutex 1180.3 1352.3 1318.0 1325.3; every fencelock round is
	// slower, so p=0.029 (the least 4+4 rounds can give).
	r := row(t, rep, "etcd", "uncontended acquire+release")
	require.Len(t, r.Ratios, 1)
	assert.Equal(t, "mutex", r.Ratios[0].Anchor)
	assert.InDelta(t, 1362.2e-6, r.Stats[0].Summary.Center, 1e-9)
	assert.InDelta(t, 1362.2/1321.65, r.Ratios[0].Value, 1e-9)
	assert.InDelta(t, 0.0286, r.Ratios[0].Comparison.P, 1e-3)
	assert.True(t, r.Ratios[0].Significant())

	r = row(t, rep, "etcd", "8-way grants/s") // 477.1 / 78.775
	assert.InDelta(t, 477.1/78.775, r.Ratios[0].Value, 1e-9)

	// Redis handoff p99, ms: fencelock 0.5507 0.4361 0.4726 0.6476,
	// redislock 1.401 4.263 1.405 0.8944, redsync 5.788 6.194 1.625 2.587.
	r = row(t, rep, "redis", "8-way handoff p99")
	require.Len(t, r.Ratios, 2)
	assert.InDelta(t, 0.51165/1.403, r.Ratios[0].Value, 1e-9)
	assert.InDelta(t, 0.51165/((2.587+5.788)/2), r.Ratios[1].Value, 1e-9)

	// Redis grants/s: fencelock 3959 3630 3622 3440 against redislock's
	// 4691 2083 5639 3859 overlap: no significant difference.
	r = row(t, rep, "redis", "8-way grants/s")
	assert.InDelta(t, 3626.0/4275.0, r.Ratios[0].Value, 1e-9)
	assert.False(t, r.Ratios[0].Significant())

	// Metrics beyond the main four are rows too, whatever they are.
	r = row(t, rep, "redis", "8-way wakeups/grant")
	assert.Len(t, r.Stats, 1)
	row(t, rep, "redis", "8-way min-share-%")

	// The floor has no fencelock, so no ratio.
	r = row(t, rep, "floor", "uncontended acquire+release")
	assert.Empty(t, r.Ratios)
	assert.Equal(t, "sync.Mutex", r.Stats[0].Impl)

	// The round trip: Redis's one BenchmarkRoundTrip; none for etcd.
	require.NotNil(t, rep.Backends[1].RTT)
	assert.InDelta(t, 34016e-9, rep.Backends[1].RTT.Center, 1e-12)
	assert.Nil(t, rep.Backends[0].RTT)
}

func TestMarkdown(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, readTestdata(t).Markdown(&buf, benchreport.RunInfo{Command: "scripts/bench", Took: "1m", Chart: "bench.svg"}))
	md := buf.String()
	for _, want := range []string{
		"| etcd | uncontended acquire+release | 1.362ms ± ∞ | concurrency.Mutex 1.322ms ± ∞ | **1.03x** (p=0.029 n=4) |  |  | not measured |",
		"| Redis | 8-way grants/s | 3.626k ± ∞ | bsm/redislock 4.275k ± ∞ | ~ 0.85x (p=0.486 n=4) | redsync 2.449k ± ∞ | ~ 1.48x (p=0.057 n=4) | 34.02µs |",
		"| Redis | 8-way handoff p99 | 511.7µs ± ∞ (15.0 RTT) |",
		"| sync.Mutex floor | uncontended acquire+release |  | sync.Mutex ",
		"- etcd: 4 rounds, `-benchtime 100x`, commit 9c49a4b, 2026-12-02T08:15:00Z",
		"- machine: AMD EPYC, nproc 2, GOMAXPROCS 2",
		"](bench.svg)",
	} {
		assert.Contains(t, md, want)
	}
}

func TestChart(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, readTestdata(t).Chart(&buf))
	svg := buf.String()
	assert.True(t, strings.HasPrefix(svg, "<?xml"), svg[:min(len(svg), 100)])
	assert.Contains(t, svg, "<svg")
	assert.Contains(t, svg, "Arial") // the font's fallbacks
	for _, label := range []string{"fencelock", "bsm/redislock", "sync.Mutex", "round trip (RTT)", "Redis  handoff p99", "100µs"} {
		assert.Contains(t, svg, label)
	}
}

func TestReadRefusesIncompleteFiles(t *testing.T) {
	_, err := benchreport.Read()
	assert.Error(t, err)
	path := t.TempDir() + "/redis.txt"
	require.NoError(t, os.WriteFile(path, []byte("BenchmarkRoundTrip-2 \t 300 \t 34016 ns/op\n"), 0o644))
	_, err = benchreport.Read(path)
	assert.ErrorContains(t, err, "no BenchmarkUncontended results")
}

// Without BenchmarkRoundTrip, an rtt-us metric gives the round trip, and
// any metric the benchmarks add is a row: a time in seconds, others as
// they are.
func TestRoundTripFromMetric(t *testing.T) {
	path := t.TempDir() + "/zookeeper.txt"
	lines := []string{
		"BenchmarkUncontended/round=0/impl=fencelock-2 \t 100 \t 1000000 ns/op \t 500 acquire-us \t 400 release-us",
		"BenchmarkUncontended/round=0/impl=zklock-2 \t 100 \t 1000000 ns/op \t 600 acquire-us \t 400 release-us",
		"BenchmarkContended8/round=0/impl=fencelock-2 \t 100 \t 1000000 ns/op \t 1000 grants/s \t 1 handoff-p50-ms \t 3 handoff-p99-ms \t 200 rtt-us \t 5 handoff-p50-rtt",
		"BenchmarkContended8/round=0/impl=zklock-2 \t 100 \t 1000000 ns/op \t 800 grants/s \t 1.2 handoff-p50-ms \t 4 handoff-p99-ms \t 100 rtt-us \t 12 handoff-p50-rtt",
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	rep, err := benchreport.Read(path)
	require.NoError(t, err)
	require.NotNil(t, rep.Backends[0].RTT)
	assert.InDelta(t, 150e-6, rep.Backends[0].RTT.Center, 1e-12)
	r := row(t, rep, "zookeeper", "8-way rtt")
	assert.Equal(t, "s", r.Unit)
	r = row(t, rep, "zookeeper", "8-way handoff-p50-rtt")
	assert.InDelta(t, 5.0/12, r.Ratios[0].Value, 1e-9)
	r = row(t, rep, "zookeeper", "uncontended acquire+release")
	assert.InDelta(t, 0.9, r.Ratios[0].Value, 1e-9)
}

// The Redis Cluster's file has rows of its own: per cluster size, fencelock
// beside redislock; the handoff on the cluster beside the single server and
// the cluster without local subscriptions; its round trip is the handoff's.
func TestClusterRows(t *testing.T) {
	rep, err := benchreport.Read("testdata/redis-cluster.txt")
	require.NoError(t, err)
	b := rep.Backends[0]
	assert.Equal(t, []string{"fencelock", "redislock"}, b.Impls)
	assert.Equal(t, "Redis Cluster", b.Title())
	var labels []string
	for _, r := range rep.Rows {
		labels = append(labels, r.Label)
	}
	assert.Equal(t, []string{
		"1 master: many locks, grants/s", "1 master: requests/grant", "1 master: busiest master's CPU/grant", "1 master: client CPU/grant",
		"2 masters: many locks, grants/s", "2 masters: requests/grant", "2 masters: busiest master's CPU/grant", "2 masters: client CPU/grant",
		"3 masters: many locks, grants/s", "3 masters: requests/grant", "3 masters: busiest master's CPU/grant", "3 masters: client CPU/grant",
		"cluster vs single server: handoff p50", "cluster vs single server: handoff p99", "cluster vs single server: servers' CPU/handoff",
	}, labels)

	// busiest-server-cpu-us, 3 masters: fencelock 94.61 88.98 79.56 72.74,
	// redislock 54.44 54.73 55.74 46.04: every fencelock round higher.
	r := row(t, rep, "redis-cluster", "3 masters: busiest master's CPU/grant")
	assert.Equal(t, "s", r.Unit)
	assert.InDelta(t, 84.27e-6, r.Stats[0].Summary.Center, 1e-12)
	assert.InDelta(t, 84.27/54.585, r.Ratios[0].Value, 1e-9)
	assert.True(t, r.Ratios[0].Significant())

	// handoff-p50-ms: cluster 0.4694 0.4187 0.4506 0.5179, single 0.4667
	// 0.3794 0.3112 0.2643, cluster-bus 0.8670 0.7814 0.7545 0.4814.
	r = row(t, rep, "redis-cluster", "cluster vs single server: handoff p50")
	require.Len(t, r.Ratios, 2)
	assert.Equal(t, []string{"fencelock", "single", "cluster-bus"}, []string{r.Stats[0].Impl, r.Stats[1].Impl, r.Stats[2].Impl})
	assert.InDelta(t, 0.46/0.3453, r.Ratios[0].Value, 1e-9)
	assert.InDelta(t, 0.46/0.76795, r.Ratios[1].Value, 1e-9)

	// rtt-us of the cluster's handoffs: 110.3 175.4 182.7 175.5.
	require.NotNil(t, b.RTT)
	assert.InDelta(t, 175.45e-6, b.RTT.Center, 1e-12)

	var buf bytes.Buffer
	require.NoError(t, rep.Markdown(&buf, benchreport.RunInfo{Command: "scripts/bench"}))
	assert.Contains(t, buf.String(), "| Redis Cluster | cluster vs single server: handoff p50 | 460.0µs ± ∞ (2.6 RTT) | single server 345.3µs ± ∞ | ~ 1.33x (p=0.114 n=4) | cluster, notices over the bus 768.0µs ± ∞ |")
	assert.Contains(t, buf.String(), "load average 14.08 16.37 18.96 before")
	assert.Contains(t, buf.String(), "Redis Cluster: clusters of 1, 2 and 3 masters")

	// With the other backends: the chart leaves the cluster's rows out.
	rep, err = benchreport.Read(append(testFiles, "testdata/redis-cluster.txt")...)
	require.NoError(t, err)
	buf.Reset()
	require.NoError(t, rep.Chart(&buf))
	assert.NotContains(t, buf.String(), "Redis Cluster")
}
