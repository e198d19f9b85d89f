package main

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/pgtest"
)

// isStale reports whether err is a fencing rejection.
func isStale(err error) bool { return errors.Is(err, fencing.ErrStaleToken) }

func TestBatchJobUnderLease(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t).NewDatabase(t)
	j, err := open(ctx, dsn, t.TempDir())
	require.NoError(t, err)
	defer j.db.Close()
	_, err = j.db.Exec(`INSERT INTO orders (amount_cents) VALUES (1000), (250), (4999)`)
	require.NoError(t, err)
	locker, err := backend.Open(ctx, "mem://batchjob-test")
	require.NoError(t, err)
	defer locker.Close()

	var out bytes.Buffer
	first, err := j.runLocked(ctx, locker, &out)
	require.NoError(t, err, out.String())
	second, err := j.runLocked(ctx, locker, &out)
	require.NoError(t, err, out.String())
	require.Greater(t, second, first)

	// The first run, paused before its writes and resumed after the second
	// run finished, is refused at its first write and changes nothing.
	_, err = j.db.Exec(`INSERT INTO orders (amount_cents) VALUES (1)`)
	require.NoError(t, err)
	err = j.run(ctx, first, &out)
	require.Error(t, err)
	assert.True(t, isStale(err), "%v", err)
	assert.Contains(t, err.Error(), "step 2 (export)")
	var total int64
	require.NoError(t, j.db.QueryRow(`SELECT total_cents FROM settlement_summary`).Scan(&total))
	assert.Equal(t, int64(6249), total)
	b, tok, err := j.exports.Read("settlement-2024-06-01.csv")
	require.NoError(t, err)
	assert.Equal(t, second, tok)
	assert.Contains(t, string(b), ",3,6249")

	// A run that passed step 2 before the newer holder wrote is refused at
	// the next fenced write (each resource keeps its own highest token).
	err = j.summary.Upsert(ctx, j.db, "2024-06-01", first, []string{"orders", "total_cents"}, []any{99, 99})
	assert.True(t, isStale(err), "%v", err)
	err = j.ledger.Do(ctx, "ledger/2024-06-01", first, nil)
	assert.True(t, isStale(err), "%v", err)
	t.Log("\n" + out.String())
}
