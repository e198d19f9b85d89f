package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/pgtest"
)

func TestEachJobClaimedOnce(t *testing.T) {
	dsn := pgtest.Start(t).NewDatabase(t)
	var out bytes.Buffer
	per, err := run(context.Background(), dsn, 200, 8, &out)
	require.NoError(t, err)
	assert.Contains(t, out.String(), "200 jobs, 8 workers: 200 claims, each job once, 0 still pending")
	n := 0
	for _, c := range per {
		n += c
	}
	assert.Equal(t, 200, n)
}
