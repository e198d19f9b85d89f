package lockbench_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/internal/lockbench"
)

func memContenders(t *testing.T, n int) []lockbench.Contender {
	srv := mem.NewServer()
	cs := make([]lockbench.Contender, n)
	for i := range cs {
		l, err := mem.New(srv.Connect())
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		var ls *backend.Lease
		cs[i] = lockbench.Contender{
			Lock:   func(ctx context.Context) (err error) { ls, err = l.Acquire(ctx, "bench"); return err },
			Unlock: func(ctx context.Context) error { return ls.Release(ctx) },
		}
	}
	return cs
}

func TestRunUncontended(t *testing.T) {
	done := 0
	r, err := lockbench.RunUncontended(context.Background(), memContenders(t, 1)[0], 3, 50, func(n int) { done = n })
	require.NoError(t, err)
	assert.Equal(t, 50, done)
	assert.Len(t, r.Total, 50)
	assert.True(t, slicesSorted(r.Total))
	assert.LessOrEqual(t, lockbench.Percentile(r.Acquire, 0.5), lockbench.Percentile(r.Acquire, 0.99))
}

func TestRunContended(t *testing.T) {
	r, err := lockbench.RunContended(context.Background(), memContenders(t, 4), 200, nil)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, r.Grants, 200)
	sum := 0
	for _, n := range r.PerContender {
		sum += n
	}
	assert.Equal(t, r.Grants, sum)
	assert.NotEmpty(t, r.Handoffs)
	assert.Positive(t, r.GrantsPerSecond())
}

// Each grant is held for the hold time: the grants take at least their
// holds end to end (a lower bound, so a busy machine cannot fail it).
func TestRunContendedHold(t *testing.T) {
	const grants, hold = 20, 5 * time.Millisecond
	r, err := lockbench.RunContendedHold(context.Background(), memContenders(t, 3), grants, hold, nil)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, r.Grants, grants)
	assert.GreaterOrEqual(t, r.Elapsed, time.Duration(r.Grants)*hold)
}

// A "lock" that does not exclude must be caught.
func TestRunContendedDetectsOverlap(t *testing.T) {
	broken := lockbench.Contender{
		Lock:   func(context.Context) error { return nil },
		Unlock: func(context.Context) error { runtime.Gosched(); return nil }, // let the others in
	}
	_, err := lockbench.RunContended(context.Background(), []lockbench.Contender{broken, broken, broken, broken}, 100000, nil)
	assert.True(t, errors.Is(err, lockbench.ErrOverlap), "%v", err)
}

// Each group contends for a lock of its own: holders of different locks
// at once are no overlap (each group's grants are held long enough for
// the groups to hold together), every group gets grants, and a group whose
// "lock" does not exclude is caught.
func TestRunContendedNames(t *testing.T) {
	groups := [][]lockbench.Contender{memContenders(t, 3), memContenders(t, 3), memContenders(t, 3)}
	r, err := lockbench.RunContendedNames(context.Background(), groups, 60, time.Millisecond, nil)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, r.Grants, 60)
	require.Len(t, r.PerContender, 9)
	sum := 0
	for g := range groups {
		n := r.PerContender[3*g] + r.PerContender[3*g+1] + r.PerContender[3*g+2]
		assert.Positive(t, n, "group %d", g)
		sum += n
	}
	assert.Equal(t, r.Grants, sum)
	assert.NotEmpty(t, r.Handoffs)

	broken := lockbench.Contender{
		Lock:   func(context.Context) error { return nil },
		Unlock: func(context.Context) error { runtime.Gosched(); return nil },
	}
	groups = [][]lockbench.Contender{memContenders(t, 2), {broken, broken, broken, broken}}
	_, err = lockbench.RunContendedNames(context.Background(), groups, 100000, 0, nil)
	assert.ErrorIs(t, err, lockbench.ErrOverlap)
}

func slicesSorted(ds []time.Duration) bool {
	for i := 1; i < len(ds); i++ {
		if ds[i] < ds[i-1] {
			return false
		}
	}
	return true
}

func TestInterleave(t *testing.T) {
	t.Setenv(lockbench.RoundsEnv, "3")
	var order []string
	testing.Benchmark(func(b *testing.B) {
		lockbench.Interleave(b, []string{"a", "b", "c"}, func(s string) string { return s }, func(b *testing.B, impl string) {
			if b.N == 1 {
				order = append(order, impl)
			}
		})
	})
	assert.Equal(t, []string{"a", "b", "c", "c", "b", "a", "a", "b", "c"}, order, "alternating order, 3 rounds")
}

func TestRounds(t *testing.T) {
	t.Setenv(lockbench.RoundsEnv, "")
	n, err := lockbench.Rounds()
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	for _, bad := range []string{"0", "-2", "x"} {
		t.Setenv(lockbench.RoundsEnv, bad)
		_, err := lockbench.Rounds()
		assert.Error(t, err, bad)
	}
}
