package pgtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/pgtest"
)

func TestStartRestart(t *testing.T) {
	c := pgtest.Start(t)
	db := pgtest.Open(t, c.NewDatabase(t))
	_, err := db.Exec(`CREATE TABLE t (v int); INSERT INTO t VALUES (42)`)
	require.NoError(t, err)
	c.Restart(t)
	var v int
	require.NoError(t, db.QueryRow(`SELECT v FROM t`).Scan(&v), "the pool reconnects after the restart")
	require.Equal(t, 42, v)
}
