package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/pgtest"
)

func TestPausedHolderRefused(t *testing.T) {
	dsn := pgtest.Start(t).NewDatabase(t)
	var out bytes.Buffer
	res, err := run(context.Background(), dsn, 2*time.Second, &out)
	require.NoError(t, err, out.String())
	t.Log("\n" + out.String())
	assert.Greater(t, res.TokenB, res.TokenA)
	var stale *fencing.StaleTokenError
	require.ErrorAs(t, res.Late, &stale, out.String())
	assert.Equal(t, res.TokenB, stale.Highest, "refused for B's grant")
	assert.Equal(t, "B", res.WrittenBy)
	assert.Equal(t, []string{"A@" + res.TokenA.String(), "B@" + res.TokenB.String()}, res.Log, "the late write left nothing")

	// Run again on the same database: the tokens go on rising.
	again, err := run(context.Background(), dsn, 2*time.Second, &out)
	require.NoError(t, err, out.String())
	assert.Greater(t, again.TokenA, res.TokenB)
	assert.ErrorIs(t, again.Late, fencing.ErrStaleToken)
}
