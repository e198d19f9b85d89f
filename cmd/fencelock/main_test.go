package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain runs the watchdog when the test binary is started as one: run
// and elect, in process (mem://), start os.Executable, this binary.
func TestMain(m *testing.M) {
	runWatchdogIfAsked()
	stopBeforeTellingIfAsked()
	// The tests name their backends themselves: a developer's
	// $FENCELOCK_URL must not reach the parallel ones that use the
	// default (mem://) or check a missing --url.
	os.Unsetenv("FENCELOCK_URL")
	os.Exit(m.Run())
}

func TestDemoRejectsStaleWrite(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo"}, &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "rejects A's write")
	assert.Contains(t, out.String(), "OK: A's stale write")
	// A's pause is a silent connection: A learns of its loss from its own
	// local deadline, not from an error of its client.
	assert.Contains(t, out.String(), "no renewal answered before the local deadline")
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	assert.Equal(t, exitUsage, run(context.Background(), nil, &out, &errOut))
	assert.Equal(t, exitUsage, run(context.Background(), []string{"nosuch"}, &out, &errOut))
	assert.Contains(t, errOut.String(), `unknown command "nosuch"`)
	assert.Equal(t, exitUsage, run(context.Background(), []string{"demo", "-ttl=x"}, &out, &errOut))
	assert.Equal(t, 0, run(context.Background(), []string{"help"}, &out, &errOut))
}

func TestDemoOnURL(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--url", "mem://demo-url", "--ttl", "300ms"}, &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "rejects A's write")
	assert.Equal(t, exitInvalid, run(context.Background(), []string{"demo", "--url", "nosuch://"}, &out, &errOut))
}

func TestBenchOnMem(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"bench", "--url", "mem://bench", "-n", "200", "-c", "3", "--json"}, &out, &errOut), errOut.String())
	var rep benchJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, 200, rep.Uncontended.Ops)
	assert.Positive(t, rep.Uncontended.P50Seconds)
	assert.GreaterOrEqual(t, rep.Contended.Grants, 200)
	assert.Len(t, rep.Contended.GrantsPerContender, 3)
	assert.Positive(t, rep.Contended.GrantsPerSecond)
	assert.Empty(t, errOut.String(), "no progress bar when stderr is not a terminal")

	out.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"bench", "--url", "mem://bench", "-n", "50", "-c", "2"}, &out, &errOut))
	assert.Contains(t, out.String(), "grants/s")
	assert.Contains(t, out.String(), "█")
	assert.Equal(t, exitUsage, run(context.Background(), []string{"bench"}, &out, &errOut))
	assert.Equal(t, exitInvalid, run(context.Background(), []string{"bench", "--url", "nosuch://"}, &out, &errOut))
}
