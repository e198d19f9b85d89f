package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/pgtest"
)

func TestDigestSentOnce(t *testing.T) {
	dsn := pgtest.Start(t).NewDatabase(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), dsn, 16, &out))
	assert.Contains(t, out.String(), "16 workers ran the digest")
	assert.Contains(t, out.String(), "; 1 sent it")
	out.Reset()
	require.NoError(t, run(context.Background(), dsn, 16, &out), "a second round the same day")
	assert.Contains(t, out.String(), "; 0 sent it")
}
