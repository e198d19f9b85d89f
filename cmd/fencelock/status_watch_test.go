package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// These tests cover fencelock status --watch: the lines it prints at each
// change, the hold times it measures from outside (holdWatcher, shared with
// advise), its end on a signal and its usage errors. The runs on a real
// server of every backend are in every_backend_test.go.

// holdWatcher counts a hold from the read before its holder was first
// seen to the read that saw it gone; holds whose start or end it did not
// see, or that ended across a failed read, are not counted.
func TestHoldWatcher(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	held := func(e backend.Entry) backend.Status { return backend.Status{Name: "job", Holder: &e} }
	free := backend.Status{Name: "job"}

	var w holdWatcher
	w.observe(at(0), held(backend.Entry{ID: "a", Token: 1})) // held at the first read: its start was not seen
	w.observe(at(100), held(backend.Entry{ID: "a", Token: 1}))
	w.observe(at(200), free)
	assert.Zero(t, w.times().Count, "a hold already under way at the first read")

	w.observe(at(300), held(backend.Entry{ID: "b", Token: 2})) // from 200
	w.observe(at(400), held(backend.Entry{ID: "b", Token: 2}))
	w.observe(at(500), held(backend.Entry{ID: "c", Token: 3})) // b: 300ms; c from 400
	w.observe(at(600), held(backend.Entry{ID: "c", Token: 4})) // the same id, a new token: c/3 200ms; c/4 from 500
	w.observe(at(700), free)                                   // c/4: 200ms
	assert.Equal(t, holdTimesOf(300*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond), w.times())
	assert.Equal(t, uint64(3), w.times().Count)
	assert.Equal(t, 300*time.Millisecond, w.times().Max)

	// A failed read in a hold does not matter; one across its end does.
	w.observe(at(800), held(backend.Entry{ID: "d", Token: 5})) // from 700
	w.failed()
	w.observe(at(1000), held(backend.Entry{ID: "d", Token: 5}))
	w.observe(at(1100), free) // d: 400ms
	assert.Equal(t, uint64(4), w.times().Count)
	assert.Equal(t, 400*time.Millisecond, w.times().Max)
	w.observe(at(1200), held(backend.Entry{ID: "e", Token: 6}))
	w.failed()
	w.observe(at(1500), held(backend.Entry{ID: "f", Token: 7})) // e's end and f's start not seen
	w.observe(at(1600), free)
	w.failed()
	w.observe(at(1700), held(backend.Entry{ID: "g", Token: 8})) // g's start not seen
	w.observe(at(1800), free)
	assert.Equal(t, uint64(4), w.times().Count, "holds across a failed read are not counted")

	// The same holds fed to a Locker's computation and to advise's
	// holdWatcher give the same figures, max exact (advise reported
	// p99.9 620ms where a Locker said 558ms, for a true max of 600ms):
	// holds of 0.6ms, 1.2ms, ... 600ms, in a shuffled order.
	var many holdWatcher
	var want []time.Duration
	many.observe(at(0), free)
	for i := 1; i <= 1000; i++ {
		n := (i * 7919) % 1000
		if n == 0 {
			n = 1000
		}
		d := time.Duration(n) * 600 * time.Microsecond
		want = append(want, d)
		start := at(10_000 * i)
		many.observe(start, free)
		many.observe(start, held(backend.Entry{ID: fmt.Sprint(i)}))
		many.observe(start.Add(d), free)
	}
	h := many.times()
	assert.Equal(t, holdTimesOf(want...), h)
	assert.Equal(t, uint64(1000), h.Count)
	assert.Equal(t, 600*time.Millisecond, h.Max, "exact")
	assert.Equal(t, 600*time.Millisecond, h.P999, "p99.9 599.4ms: its bucket holds the max")
	assert.GreaterOrEqual(t, h.P50, 300*time.Millisecond, "never below the exact p50")
	assert.GreaterOrEqual(t, h.P99, 594*time.Millisecond, "never below the exact p99")
}

// holdTimesOf is what a Locker reports as its HoldTimes after holds of ds
// ended: backend's TestLockerHoldTimesAreHoldHistogram shows that a
// Locker's figures are a HoldHistogram's.
func holdTimesOf(ds ...time.Duration) backend.HoldTimes {
	var h backend.HoldHistogram
	for _, d := range ds {
		h.Add(d)
	}
	return h.Times()
}

// watchMem starts status --watch args in process on lock "job" of
// mem://name, and returns a Locker of the same mem:// backend.
func watchMem(t *testing.T, name string, args ...string) (*backend.Locker, *live) {
	t.Helper()
	url := "mem://" + name + "?ttl=30s"
	l, err := backend.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, startLive(t, false, append([]string{"status", "--watch", "--url", url, "--interval", "10ms"}, append(args, "job")...)...)
}

// watchLines returns the complete lines of out.
func watchLines(out string) []string {
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		return strings.Split(out[:i], "\n")
	}
	return nil
}

// waitLine waits for a line of out, at index from or after, that matches
// re, and returns its index.
func waitLine(t *testing.T, out func() string, from int, re string) int {
	t.Helper()
	rx := regexp.MustCompile(re)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for i, l := range watchLines(out()) {
			if i >= from && rx.MatchString(l) {
				return i
			}
		}
	}
	t.Fatalf("no line matching %s at line %d or after: %s", re, from, out())
	return -1
}

// Text: one line per state, each with its time, at each change only (a
// TTL running down is no change): free, held, a waiter queued, the waiter
// holding, free; the hold times once a hold has ended.
func TestStatusWatchTextOnMem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	la, w := watchMem(t, "status-watch-text")
	lb, err := backend.Open(ctx, "mem://status-watch-text")
	require.NoError(t, err)
	defer lb.Close()
	out := w.out.String

	n := waitLine(t, out, 0, `^\S+ lock "job" is free$`)
	assert.Zero(t, n, "the first line is the state at the start: %s", out())
	a, err := la.Acquire(ctx, "job", backend.WithHolder("worker-a"))
	require.NoError(t, err)
	n = waitLine(t, out, n+1, `^\S+ lock "job" held by worker-a, token `+a.Token().String()+`, TTL left \S+, id \S+$`)
	waited := make(chan *backend.Lease, 1)
	go func() {
		b, err := lb.Acquire(ctx, "job", backend.WithHolder("worker-b"))
		assert.NoError(t, err)
		waited <- b
	}()
	n = waitLine(t, out, n+1, `^\S+ lock "job" held by worker-a, token `+a.Token().String()+`, .*; 1 waiting: 1\. worker-b, `)
	time.Sleep(50 * time.Millisecond) // a hold of 50ms at least
	require.NoError(t, a.Release(ctx))
	b := <-waited
	n = waitLine(t, out, n+1, `^\S+ lock "job" held by worker-b, token `+b.Token().String()+`, [^;]*; holds: 1, p50 \S+, p99 \S+, p99\.9 \S+, max \S+$`)
	require.NoError(t, b.Release(ctx))
	n = waitLine(t, out, n+1, `^\S+ lock "job" is free; holds: 2, p50 \S+, p99 \S+, p99\.9 \S+, max \S+$`)
	time.Sleep(100 * time.Millisecond) // ten reads of the same state
	w.stop()
	r := w.wait(t)
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr)

	lines := watchLines(r.stdout)
	assert.Len(t, lines, n+1, "nothing after the last change: %s", out())
	ttl := regexp.MustCompile(`, TTL left [^,;]*`)
	prev := ""
	for _, l := range lines {
		stamp, rest, ok := strings.Cut(l, " ")
		require.True(t, ok, l)
		_, err := time.Parse(time.RFC3339Nano, stamp)
		assert.NoError(t, err, "the time a line starts with: %s", l)
		state := ttl.ReplaceAllString(rest, "")
		assert.NotEqual(t, prev, state, "a line without a change: %s", out())
		prev = state
	}
	m := regexp.MustCompile(`max (\S+)$`).FindStringSubmatch(lines[len(lines)-1])
	require.NotNil(t, m)
	maxHold, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, maxHold, 50*time.Millisecond, "a hold is never counted shorter than it was: %s", out())
}

// JSON: one object per line, with the keys of status --json and "time",
// "holds" (null before a hold has ended) and "error" (null).
func TestStatusWatchJSONOnMem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, w := watchMem(t, "status-watch-json", "--json")
	out := w.out.String
	n := waitLine(t, out, 0, `"holder":null`)
	lease, err := l.Acquire(ctx, "job", backend.WithHolder("worker-a"), backend.WithMetadata(map[string]string{"pid": "42"}))
	require.NoError(t, err)
	n = waitLine(t, out, n+1, `"token":"`+lease.Token().String()+`"`)
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, lease.Release(ctx))
	waitLine(t, out, n+1, `"holder":null.*"holds":\{`)
	w.stop()
	r := w.wait(t)
	assert.Equal(t, exitOK, r.code, r.stderr)

	lines := watchLines(r.stdout)
	require.Len(t, lines, 3, "free, held, free: %s", out())
	for i, line := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		assert.ElementsMatch(t, []string{"error", "holder", "holds", "name", "time", "waiters"}, keys(m), line)
		assert.Equal(t, "job", m["name"])
		assert.Nil(t, m["error"], line)
		assert.Equal(t, []any{}, m["waiters"], line)
		_, err := time.Parse(time.RFC3339Nano, m["time"].(string))
		assert.NoError(t, err, line)
		if i < 2 {
			assert.Nil(t, m["holds"], "null before a hold has ended: %s", line)
		}
	}
	var held statusWatchJSON
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &held))
	require.NotNil(t, held.Holder)
	assert.Equal(t, "worker-a", held.Holder.Holder)
	assert.Equal(t, map[string]string{"pid": "42"}, held.Holder.Metadata)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &m))
	holds, ok := m["holds"].(map[string]any)
	require.True(t, ok, lines[2])
	assert.ElementsMatch(t, []string{"count", "p50_seconds", "p99_seconds", "p999_seconds", "max_seconds"}, keys(holds))
	assert.Equal(t, 1.0, holds["count"])
	assert.GreaterOrEqual(t, holds["max_seconds"].(float64), 0.02, "seconds: %s", lines[2])
	assert.Less(t, holds["max_seconds"].(float64), 30.0, "seconds: %s", lines[2])
}

// Bad flags and names fail before any connection is made: at an address
// where nothing listens, a dial would fail with status 69.
func TestStatusWatchUsage(t *testing.T) {
	t.Setenv("FENCELOCK_URL", "")
	url := "etcd://127.0.0.1:1/x?dial_timeout=5s"
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--url", url, "--interval", "50ms", "job"}, exitUsage}, // --interval without --watch
		{[]string{"--url", url, "--json", "--interval", "1s", "job"}, exitUsage},
		{[]string{"--url", url, "--watch", "--interval", "0", "job"}, exitUsage},
		{[]string{"--url", url, "--watch", "--interval", "-1s", "job"}, exitUsage},
		{[]string{"--url", url, "--watch", "--interval", "soon", "job"}, exitUsage},
		{[]string{"--url", url, "--watch", "--timeout", "0", "job"}, exitUsage},
		{[]string{"--url", url, "--watch", "--bogus", "job"}, exitUsage},
		{[]string{"--url", url, "--watch"}, exitUsage},
		{[]string{"--url", url, "--watch", "a", "b"}, exitUsage},
		{[]string{"--watch", "job"}, exitUsage}, // no URL
		{[]string{"--url", url, "--watch", "bad\x00name"}, exitInvalid},
		{[]string{"--url", url + "&bogus=1", "--watch", "job"}, exitInvalid},
		{[]string{"--url", url, "bad\x00name"}, exitInvalid},
	} {
		args := append([]string{"status"}, c.args...)
		r := cli(args...)
		assert.Equal(t, c.code, r.code, "%q: %+v", args, r)
		assert.True(t, strings.HasPrefix(r.stderr, "fencelock status: "), "%q: %s", args, r.stderr)
		assert.NotContains(t, r.stderr, "127.0.0.1:1", "%q: no dial", args)
		assert.Empty(t, r.stdout, "%q", args)
	}

	r := cli("status", "-h")
	assert.Equal(t, exitOK, r.code)
	for _, s := range []string{"--watch", "--interval", "default 100ms", `"holds"`, "p999_seconds", `"error"`, `"time"`, "null until a hold has ended"} {
		assert.Contains(t, r.stdout, s)
	}
}
