package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/pgtest"
)

func TestStockNeverNegative(t *testing.T) {
	dsn := pgtest.Start(t).NewDatabase(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), dsn, 10, 60, &out))
	assert.Contains(t, out.String(), "sold 10, sold out for 50, stock left 0")
}
