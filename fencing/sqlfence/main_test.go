package sqlfence_test

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/pgtest"
)

// TestMain closes the cluster the tests share (pgtest.Shared).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
