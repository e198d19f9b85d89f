package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/etcdtest"
)

// testChaosOn runs a short campaign through the binary (its workers are
// the binary re-executed) with every client-side fault, and finds the
// table, no violation, and the report's files.
func testChaosOn(t *testing.T, url string) {
	out := t.TempDir()
	r := binary(t, "chaos", "--url", url, "--duration", "12s", "--workers", "3", "--out", out)
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "stale writes accepted (must be 0)")
	assert.Contains(t, r.stdout, "no violation")
	for _, f := range []string{"report.html", "timeline.html", "history.jsonl", "summary.json"} {
		st, err := os.Stat(filepath.Join(out, f))
		if assert.NoError(t, err) {
			assert.Positive(t, st.Size(), f)
		}
	}
}

// An unfenced campaign runs, and its violations are status 1: paused
// holders wake and write over newer holders' writes (long holds, so that a
// pause lands between a read and its write).
func TestChaosViolationIs1(t *testing.T) {
	t.Parallel() // long, and on servers of its own
	addr := strings.TrimPrefix(etcdtest.Start(t).Endpoints()[0], "http://")
	r := binary(t, "chaos", "--url", "etcd://"+addr+"/cli-unfenced", "--guard", "none", "--faults", "pause",
		"--hold", "300ms", "--workers", "3", "--duration", "25s", "--out", t.TempDir())
	require.Equal(t, exitFailure, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "VIOLATION: ")
	assert.Contains(t, r.stdout, "stale writes accepted")
}

// A campaign that cannot be run is refused before any worker starts, with
// status 65.
func TestChaosInvalidIs65(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--url", "mem://x"},
		{"--url", "nosuch://x"},
		{"--url", "etcd://127.0.0.1:1/x", "--faults", "flood"},
		{"--url", "etcd://127.0.0.1:1/x", "--faults", "member"},
		{"--url", "etcd://127.0.0.1:1/x", "--guard", "redis"},
		{"--url", "etcd://127.0.0.1:1/x", "--guard", "paper"},
		{"--url", "etcd://127.0.0.1:1/x", "--workers", "1"},
		{"--url", "etcd://127.0.0.1:1/x", "--redis-client", "docs"},
		{"--url", "etcd://127.0.0.1:1/x", "--guard", "etcd", "--guard-url", "127.0.0.1:2379"},
		{"--url", "etcds://127.0.0.1:1/x"},
		{"--url", "etcd://127.0.0.1:1/x", "--ttl", "1500ms"},
		{"--url", "redis://127.0.0.1:1/0", "--redis-client", "bogus"},
	} {
		r := cli(append([]string{"chaos", "--out", t.TempDir()}, args...)...)
		assert.Equal(t, exitInvalid, r.code, "%q: %+v", args, r)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%q: one line: %q", args, r.stderr)
	}
}
