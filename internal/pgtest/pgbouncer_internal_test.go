package pgtest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A missing pgbouncer is an error naming what was looked for (StartPgBouncer
// fails the test with it, never skips).
func TestPgBouncerMissing(t *testing.T) {
	t.Setenv("PGBOUNCER", "/nonexistent/pgbouncer")
	_, err := startBouncer(nil)
	require.ErrorContains(t, err, "/nonexistent/pgbouncer")
}
