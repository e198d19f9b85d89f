package fencing_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
)

func TestMemoryRejectsLowerToken(t *testing.T) {
	ctx := context.Background()
	g := fencing.NewMemory()
	require.NoError(t, fencing.Admit(ctx, g, "r", 5))
	require.NoError(t, fencing.Admit(ctx, g, "r", 5), "equal tokens (the same holder writing again) pass")
	require.NoError(t, fencing.Admit(ctx, g, "other", 1), "resources are independent")

	wrote := false
	err := g.Do(ctx, "r", 4, func(context.Context) error { wrote = true; return nil })
	require.ErrorIs(t, err, fencing.ErrStaleToken)
	assert.False(t, wrote, "a stale write must not run")
	var stale *fencing.StaleTokenError
	require.True(t, errors.As(err, &stale))
	assert.Equal(t, fencing.Token(4), stale.Token)
	assert.Equal(t, fencing.Token(5), stale.Highest)
	assert.Equal(t, "r", stale.Resource)
	assert.Equal(t, fencing.Token(5), g.Highest("r"))
}

func TestMemoryFailedWriteDoesNotRecord(t *testing.T) {
	ctx := context.Background()
	g := fencing.NewMemory()
	require.NoError(t, fencing.Admit(ctx, g, "r", 1))
	boom := errors.New("disk full")
	require.ErrorIs(t, g.Do(ctx, "r", 9, func(context.Context) error { return boom }), boom)
	assert.Equal(t, fencing.Token(1), g.Highest("r"), "a failed write must not raise the highest token")
	require.NoError(t, fencing.Admit(ctx, g, "r", 2))
}

func TestMemoryRejectsZeroToken(t *testing.T) {
	assert.ErrorIs(t, fencing.Admit(context.Background(), fencing.NewMemory(), "r", 0), fencing.ErrInvalidToken)
}

// Concurrent writers with interleaved tokens: the state is never written by
// a lower token after a higher one, and the final state is the highest's.
func TestMemoryConcurrentWritersNeverGoBackwards(t *testing.T) {
	ctx := context.Background()
	g := fencing.NewMemory()
	var mu sync.Mutex
	var history []fencing.Token
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				tok := fencing.Token(i*8 + (7 - w) + 1)
				_ = g.Do(ctx, "r", tok, func(context.Context) error {
					mu.Lock()
					history = append(history, tok)
					mu.Unlock()
					return nil
				})
			}
		}(w)
	}
	wg.Wait()
	require.NotEmpty(t, history)
	for i := 1; i < len(history); i++ {
		require.GreaterOrEqualf(t, history[i], history[i-1], "write %d with token %d after token %d", i, history[i], history[i-1])
	}
	assert.Equal(t, fencing.Token(200*8), g.Highest("r"))
}
