package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// run writes the Markdown report and the SVG chart it links to.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	md, svg := filepath.Join(dir, "bench.md"), filepath.Join(dir, "bench.svg")
	require.NoError(t, run(md, svg, "3m", "scripts/bench", []string{"../../testdata/redis.txt", "../../testdata/floor.txt"}))
	table, err := os.ReadFile(md)
	require.NoError(t, err)
	assert.Contains(t, string(table), "![fencelock beside its anchors")
	assert.Contains(t, string(table), "](bench.svg)")
	assert.Contains(t, string(table), "The run that wrote this report took 3m.")
	chart, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(chart), "<svg"))
}
