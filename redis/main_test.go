package redis

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/locktest"
	"github.com/fencelock/fencelock/internal/redistest"
)

// srv is one redis-server shared by the package's tests that need nothing
// special of it; each test works under its own key prefix.
var srv *redistest.Server

func TestMain(m *testing.M) {
	if impl := os.Getenv(foreignChildEnv); impl != "" {
		os.Exit(foreignChild(impl)) // a redsync or redislock client for fleet_test.go
	}
	s, err := redistest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv = s
	os.Setenv("REDIS_ADDR", s.Addr()) // for Example
	code := m.Run()
	s.Close()
	if benchSrv != nil {
		benchSrv.Close() // a child process: it would outlive the test binary
	}
	os.Exit(code)
}

var prefixSeq atomic.Int64

// testPrefix returns a key prefix of its own for t.
func testPrefix(t testing.TB) string {
	r := strings.NewReplacer("/", "_", "{", "_", "}", "_")
	return fmt.Sprintf("fencelock-test:%s:%d", r.Replace(t.Name()), prefixSeq.Add(1))
}

// newClient returns a client of addr, closed at cleanup.
func newClient(t testing.TB, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// locker returns a Locker with its own client of addr, closed at cleanup
// (the Locker first, then the client).
func locker(t testing.TB, addr string, cfg Config, opts ...backend.Option) *backend.Locker {
	t.Helper()
	c := newClient(t, addr)
	l, err := New(c, cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
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
