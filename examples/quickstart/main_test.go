package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQuickstartOnMem(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), "mem://quickstart", &out))
	assert.Contains(t, out.String(), "late write with the first token: fencing: stale token")
}

func TestQuickstartBadURL(t *testing.T) {
	require.Error(t, run(context.Background(), "nosuch://", &bytes.Buffer{}))
}
