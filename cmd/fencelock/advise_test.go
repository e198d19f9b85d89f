package main

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// testAdviseOn: while a worker on a Locker of its own takes the lock and
// holds it 100, 200 or 300ms at a time, advise sees the holds and
// recommends a TTL above the longest hold and below a sane bound.
func testAdviseOn(t *testing.T, url string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	worker, err := backend.Open(ctx, url)
	require.NoError(t, err)
	defer worker.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			l, err := worker.Acquire(ctx, "advised")
			if err != nil {
				return
			}
			time.Sleep(time.Duration(100*(1+i%3)) * time.Millisecond)
			_ = l.Release(context.WithoutCancel(ctx))
			time.Sleep(100 * time.Millisecond)
		}
	}()

	r := cli("advise", "--url", url, "--duration", "8s", "--interval", "20ms", "--min-holds", "5", "--json", "advised")
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Empty(t, r.stderr)
	var a adviseJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &a), r.stdout)
	assert.GreaterOrEqual(t, a.Holds, uint64(5), r.stdout)
	assert.GreaterOrEqual(t, a.MaxSeconds, 0.3, "a hold is never counted shorter than it was: %s", r.stdout)
	assert.Less(t, a.P50Seconds, a.MaxSeconds+1e-9, r.stdout)
	require.NotNil(t, a.TTLSeconds, r.stdout)
	assert.Greater(t, *a.TTLSeconds, a.MaxSeconds, r.stdout)
	assert.Greater(t, *a.TTLSeconds, 0.3, "above the longest hold: %s", r.stdout)
	assert.LessOrEqual(t, *a.TTLSeconds, 5.0, "a sane bound for holds of 300ms at most: %s", r.stdout)
	assert.Contains(t, a.Explanation, "p99.9 hold", r.stdout)
	// The advice is a TTL this backend takes as it is (etcd: whole seconds).
	ttl := time.Duration(*a.TTLSeconds * float64(time.Second)).Round(time.Millisecond)
	l, err := worker.Acquire(ctx, "advise-check", backend.WithTTL(ttl))
	require.NoError(t, err, "the advised TTL %v: %s", ttl, r.stdout)
	require.NoError(t, l.Release(ctx))

	r = cli("advise", "--url", url, "--duration", "3s", "--interval", "20ms", "--min-holds", "3", "advised")
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	t.Logf("advise:\n%s", r.stdout)
	assert.Regexp(t, `(?m)^lock "advised": \d+ holds seen in .* \(polled every 20ms\)\nhold times: p50 .*, p99 .*, p99\.9 .*, max .*\nrecommended TTL: .*\nTTL .*: p99\.9 hold .* \+ renewal headroom 500ms \+ drift margin .*\n$`, r.stdout)
}

// Too few holds: no advice, status 1, and it says so; a lock nobody takes
// has no hold at all.
func TestAdviseTooFewHolds(t *testing.T) {
	t.Parallel()
	r := cli("advise", "--url", "mem://advise-few", "--duration", "200ms", "--json", "idle")
	assert.Equal(t, exitFailure, r.code, "%+v", r)
	var a adviseJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &a), r.stdout)
	assert.Nil(t, a.TTLSeconds)
	assert.Zero(t, a.Holds)
	assert.Contains(t, a.Explanation, "too few holds seen: 0 of the 10 needed")

	r = cli("advise", "--url", "mem://advise-few", "--duration", "200ms", "idle")
	assert.Equal(t, exitFailure, r.code, "%+v", r)
	assert.Equal(t, "lock \"idle\": 0 holds seen in", r.stdout[:len("lock \"idle\": 0 holds seen in")])
	assert.NotContains(t, r.stdout, "recommended TTL")
	assert.Contains(t, r.stdout, "too few holds seen")
}

// Bad flags and names fail before any dial.
func TestAdviseUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"advise", "x"},
		{"advise", "--url", "mem://a"},
		{"advise", "--url", "mem://a", "--interval", "0", "x"},
		{"advise", "--url", "mem://a", "--duration", "-1s", "x"},
		{"advise", "--url", "mem://a", "--min-holds", "0", "x"},
		{"advise", "--url", "mem://a", "--bogus", "x"},
	} {
		r := cli(args...)
		assert.Equal(t, exitUsage, r.code, "%q: %+v", args, r)
	}
	r := cli("advise", "--url", "etcd://127.0.0.1:1/x", "bad name\x00")
	assert.Equal(t, exitInvalid, r.code, "%+v", r)
	r = cli("advise", "-h")
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, "usage: fencelock advise")
}
