package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// conformance takes mem:// as every subcommand does: the whole suite runs
// against the binary's mem adapter (it was 65: `host "" needs an explicit
// port`).
func TestConformanceOnMem(t *testing.T) {
	t.Parallel()
	code, out, errOut, _ := conformanceRun(t, 5*time.Minute, "mem://")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "conformance suite against mem://\n")
	assert.Contains(t, out, "settings: ttl 300ms")
	assert.Regexp(t, `\n([2-9]\d|\d{3,}) passed, 0 failed in`, out, "the whole suite")
	assert.Regexp(t, `Crash\S*\s+PASS`, out, "crash cases run")

	// Flags after the URL, and -ttl, as for any scheme.
	code, out, errOut, _ = conformanceRun(t, time.Minute, "mem://named", "--run", "^TryAcquire$", "-ttl", "500ms")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "settings: ttl 500ms")
	assert.Contains(t, out, "1 passed, 0 failed")

	// -parallel 1 (one case after the other) is taken; 0 is a usage error.
	code, out, errOut, _ = conformanceRun(t, time.Minute, "mem://", "-parallel", "1", "--run", "^(FIFO|TryAcquire)$")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "2 passed, 0 failed")
	r := cli("conformance", "-parallel", "0", "mem://")
	assert.Equal(t, exitUsage, r.code, "%+v", r)
	assert.Contains(t, r.stderr, "-parallel 0: want 1 or more")
}

// The URL, its hosts' ports and -ttl are checked before anything is
// dialled: 65 at once, with one line, nothing on stdout.
func TestConformanceChecksURLBeforeDial(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"etcd://10.255.255.1/x"}, "needs an explicit port"}, // would hang, not refuse, if dialled
		{[]string{"etcd://10.255.255.2,10.255.255.1:2379/x"}, "needs an explicit port"},
		{[]string{"postgres://app@/db?host=/tmp"}, "no host:port"},
		{[]string{"-ttl", "2500ms", "etcd://10.255.255.1:2379/x"}, "whole seconds"},
		{[]string{"mem://?ttl=1s"}, "mem:// takes no query parameters"},
		{[]string{"mem://x", "-ttl", "1s", "-min-ttl", "2s"}, "under MinTTL"},
		{[]string{"etcd://10.255.255.1:2379/x?bogus=1"}, "unknown query parameter"},
	} {
		start := time.Now()
		r := cli(append([]string{"conformance"}, c.args...)...)
		assert.Equal(t, exitInvalid, r.code, "%q: %+v", c.args, r)
		assert.Less(t, time.Since(start), 3*time.Second, "%q", c.args)
		assert.Empty(t, r.stdout, "%q", c.args)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%q: one line: %q", c.args, r.stderr)
		assert.Contains(t, r.stderr, c.msg, "%q", c.args)
	}
}
