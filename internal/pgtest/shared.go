package pgtest

import (
	"fmt"
	"sync"
	"testing"
)

// shared is the test binary's shared cluster (Shared), started on first
// use and closed by Main.
var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Shared returns a cluster shared by the test binary's tests, started on
// the first call: for tests that need nothing of the server but a database
// of their own (NewDatabase), and that neither stop, pause nor restart it.
// Starting a cluster (initdb, then the server) costs about a second of CPU;
// a package of ten such tests paid it ten times. It fails tb if the
// cluster does not start. The package's TestMain must run its tests
// through Main, which closes the cluster.
func Shared(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := SharedCluster()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return c
}

// SharedCluster is Shared for a TestMain, which has no testing.TB: it
// returns the shared cluster, started on the first call, or why it did
// not start.
func SharedCluster() (*Cluster, error) {
	shared.once.Do(func() { shared.c, shared.err = start(nil) })
	if shared.err != nil {
		return nil, fmt.Errorf("pgtest: the shared cluster: %w", shared.err)
	}
	return shared.c, nil
}

// Main runs m's tests and then closes the shared cluster, if Shared started
// one; it returns m.Run's exit code: func TestMain(m *testing.M) {
// os.Exit(pgtest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	if shared.c != nil {
		shared.c.Close()
	}
	return code
}
