package zookeeper

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// srv is one ZooKeeper server shared by the package's tests; each test works
// under its own prefix. Tests that stop or restart a server start their own.
var srv *zktest.Server

func TestMain(m *testing.M) {
	s, err := zktest.StartServer("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv = s
	os.Setenv("ZOOKEEPER_SERVERS", s.Addr()) // for ExampleDial
	code := m.Run()
	s.Close()
	os.Exit(code)
}

var prefixSeq atomic.Int64

// testPrefix returns a node prefix of its own for t.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("/fencelock-test/%s-%d", strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()), prefixSeq.Add(1))
}

// dialLocker returns a Locker with its own sessions to addr, closed at
// cleanup.
func dialLocker(t testing.TB, addr, prefix string, timeout time.Duration, opts ...backend.Option) *backend.Locker {
	t.Helper()
	l, err := Dial(tctx(t, 30*time.Second), Config{Servers: []string{addr}, Prefix: prefix, SessionTimeout: timeout}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// lockNodes lists the lock nodes of name, oldest first (by sequence).
func lockNodes(t testing.TB, c *zk.Conn, prefix, name string) []string {
	t.Helper()
	kids, _, err := c.Children(lockDir(prefix, name))
	if err == zk.ErrNoNode {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, k := range kids {
		if _, ok := lockSeq(k); ok {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := lockSeq(out[i])
		b, _ := lockSeq(out[j])
		return a < b
	})
	return out
}

// waitNodes waits until name has n lock nodes.
func waitNodes(t testing.TB, c *zk.Conn, prefix, name string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		nodes := lockNodes(t, c, prefix, name)
		if len(nodes) == n {
			return nodes
		}
		if time.Now().After(deadline) {
			require.FailNowf(t, "nodes", "%s has %d lock nodes %v, want %d", name, len(nodes), nodes, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nodeOf returns the path and stat of the lock node of ls, found by czxid.
func nodeOf(t testing.TB, c *zk.Conn, prefix string, ls *backend.Lease) (string, *zk.Stat) {
	t.Helper()
	dir := lockDir(prefix, ls.Name())
	for _, k := range lockNodes(t, c, prefix, ls.Name()) {
		_, st, err := c.Exists(dir + "/" + k)
		require.NoError(t, err)
		if st.Czxid == int64(ls.Token()) {
			return dir + "/" + k, st
		}
	}
	require.FailNowf(t, "no node", "no lock node of %q with czxid %d", ls.Name(), ls.Token())
	return "", nil
}

// The helpers the adapters' tests share, under this package's names.
type acquired = locktest.Result

var (
	tctx           = locktest.Ctx
	goAcquire      = locktest.Go
	waitAcquired   = locktest.Wait
	requireBlocked = locktest.RequireBlocked
	release        = locktest.Release
)
