package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// parseInterspersed takes flags before and after the positional
// arguments, and everything after "--" as positional.
func TestParseInterspersed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args       []string
		positional []string
		watch      bool
		url        string
	}{
		{[]string{"--url", "u", "a"}, []string{"a"}, false, "u"},
		{[]string{"a", "--url", "u", "--watch"}, []string{"a"}, true, "u"},
		{[]string{"--watch", "a", "b", "--url=u"}, []string{"a", "b"}, true, "u"},
		{[]string{"a", "--", "--watch", "b"}, []string{"a", "--watch", "b"}, false, ""},
		{[]string{"--url", "--", "a", "--watch"}, []string{"a"}, true, "--"}, // "--" as a flag's value
		{[]string{"--watch", "--", "-a"}, []string{"-a"}, true, ""},
		{nil, nil, false, ""},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		url := fs.String("url", "", "")
		watch := fs.Bool("watch", false, "")
		pos, code, ok := parseInterspersed(fs, c.args, io.Discard, io.Discard)
		require.True(t, ok, "%q", c.args)
		assert.Equal(t, exitOK, code)
		assert.Equal(t, c.positional, pos, "%q", c.args)
		assert.Equal(t, c.watch, *watch, "%q", c.args)
		assert.Equal(t, c.url, *url, "%q", c.args)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	_, code, ok := parseInterspersed(fs, []string{"a", "--bogus"}, io.Discard, io.Discard)
	assert.False(t, ok)
	assert.Equal(t, exitUsage, code, "a bad flag after a name is a usage error")
}

// docs/cli.md's examples put the flags after the name: status, advise,
// leader and conformance take them there (Go's flag package alone stops
// at the first argument that is not a flag, and this was status 64).
func TestFlagsAfterName(t *testing.T) {
	t.Setenv("FENCELOCK_URL", "")
	ctx := context.Background()
	l, err := backend.Open(ctx, "mem://flags-after?ttl=30s")
	require.NoError(t, err)
	defer l.Close()
	lease, err := l.Acquire(ctx, "nightly", backend.WithHolder("worker-a"))
	require.NoError(t, err)
	defer lease.Release(ctx)

	r := cli("status", "--url", "mem://flags-after", "nightly", "--json")
	require.Equal(t, exitOK, r.code, "%+v", r)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), "--json after the name: %s", r.stdout)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "worker-a", st.Holder.Holder)

	// docs/cli.md's status --watch: it watches, and ends with status 0.
	p := startLive(t, false, "status", "--url", "mem://flags-after", "nightly", "--watch", "--interval", "10ms")
	waitLine(t, p.out.String, 0, `lock "nightly" held by worker-a`)
	p.stop()
	assert.Equal(t, exitOK, p.wait(t).code)

	// docs/cli.md's advise: --duration after the name is taken (the
	// default would measure for a minute).
	start := time.Now()
	r = cli("advise", "--url", "mem://flags-after", "nightly", "--duration", "300ms", "--interval", "20ms")
	assert.Equal(t, exitFailure, r.code, "too few holds, not a usage error: %+v", r)
	assert.Contains(t, r.stdout, `lock "nightly": 0 holds seen`)
	assert.Less(t, time.Since(start), 10*time.Second)

	r = cli("leader", "--url", "mem://flags-after", "scheduler", "--json")
	require.Equal(t, exitOK, r.code, "%+v", r)
	assert.JSONEq(t, `{"name": "scheduler", "leader": null}`, r.stdout)

	// conformance URL -v: the flag is parsed, and the URL checked (65),
	// not "give one URL" (64).
	r = cli("conformance", "nosuch://x", "-v")
	assert.Equal(t, exitInvalid, r.code, "%+v", r)

	for _, args := range [][]string{
		{"status", "--url", "mem://flags-after", "nightly", "--bogus"},
		{"status", "--url", "mem://flags-after", "a", "--json", "b"},
		{"advise", "--url", "mem://flags-after", "a", "--duration", "1s", "b"},
		{"advise", "--url", "mem://flags-after", "a", "--duration", "0"},
		{"conformance", "mem://", "-v", "extra"},
	} {
		r := cli(args...)
		assert.Equal(t, exitUsage, r.code, "%q: %+v", args, r)
		assert.True(t, strings.HasPrefix(r.stderr, "fencelock "+args[0]+": "), "%q: %q", args, r.stderr)
	}
}

// leader --interval without --watch is a usage error, as status's is.
func TestIntervalNeedsWatch(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"leader", "status"} {
		for _, args := range [][]string{
			{cmd, "--url", "mem://", "--interval", "1s", "x"},
			{cmd, "--url", "mem://", "x", "--interval", "1s"},
		} {
			r := cli(args...)
			assert.Equal(t, exitUsage, r.code, "%q: %+v", args, r)
			assert.Contains(t, r.stderr, "--interval is for --watch", "%q", args)
		}
	}
}

// help takes one command name; more arguments are a usage error (64), in
// the binary too.
func TestHelpExtraArgumentsAre64(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"help", "leader", "extra"},
		{"help", "run", "--", "x"},
		{"-h", "extra"},
		{"--help", "leader"},
	} {
		r := cli(args...)
		assert.Equal(t, exitUsage, r.code, "%q: %+v", args, r)
		assert.Empty(t, r.stdout, "%q", args)
		assert.Contains(t, r.stderr, "unexpected argument", "%q", args)
	}
	assert.Equal(t, exitUsage, binary(t, "help", "leader", "extra").code)
	assert.Equal(t, exitOK, cli("help", "leader").code)
}
