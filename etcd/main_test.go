package etcd

import (
	"fmt"
	"github.com/fencelock/fencelock/internal/locktest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/etcdtest"
)

// srv is one embedded etcd server shared by the package's tests; each test
// works under its own key prefix.
var srv *etcdtest.Server

func TestMain(m *testing.M) {
	s, err := etcdtest.StartServer("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv = s
	os.Setenv("ETCD_ENDPOINTS", strings.Join(s.Endpoints(), ",")) // for Example
	code := m.Run()
	s.Close()
	closeBenchServer()
	os.Exit(code)
}

var prefixSeq atomic.Int64

// testPrefix returns a key prefix of its own for t.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("fencelock-test/%s/%d", strings.ReplaceAll(t.Name(), "/", "_"), prefixSeq.Add(1))
}

// client returns a new client of the shared server, closed at cleanup.
func client(t testing.TB) *clientv3.Client {
	t.Helper()
	return srv.NewClient(t)
}

// locker returns a Locker with its own client under prefix, closed at
// cleanup (the Locker first, then the client).
func locker(t testing.TB, prefix string, opts ...backend.Option) *backend.Locker {
	t.Helper()
	c := client(t)
	l, err := New(c, Config{Prefix: prefix}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// keys lists the keys under the directory of name, oldest first.
func keys(t testing.TB, c *clientv3.Client, prefix, name string) []*mvccpb.KeyValue {
	t.Helper()
	resp, err := c.Get(tctx(t, 10*time.Second), nameDir(prefix, name), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	require.NoError(t, err)
	return resp.Kvs
}

// allKeys lists every key under prefix.
func allKeys(t testing.TB, c *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := c.Get(tctx(t, 10*time.Second), prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	var ks []string
	for _, kv := range resp.Kvs {
		ks = append(ks, string(kv.Key))
	}
	return ks
}

// waitKeys waits until name has n keys.
func waitKeys(t testing.TB, c *clientv3.Client, prefix, name string, n int) []*mvccpb.KeyValue {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		kvs := keys(t, c, prefix, name)
		if len(kvs) == n {
			return kvs
		}
		if time.Now().After(deadline) {
			require.FailNowf(t, "keys", "%s has %d keys, want %d", name, len(kvs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// answerDelay bounds how long after a waiter's key shows up its Txn's
// answer takes to reach the waiter on a loaded machine. A wait cut off
// before that answer is reported ErrUnavailable (whether it was queued is
// unknown to the waiter), not ErrNotAcquired.
const answerDelay = 250 * time.Millisecond

// waitQueued waits until name has n keys, the last a waiter's, and then for
// that waiter to have its answer (answerDelay), so that cancelling it then
// tests a queued wait given up.
func waitQueued(t testing.TB, c *clientv3.Client, prefix, name string, n int) {
	t.Helper()
	waitKeys(t, c, prefix, name, n)
	time.Sleep(answerDelay)
}

// keyOf returns the key of ls, found by its token.
func keyOf(t testing.TB, c *clientv3.Client, prefix string, ls *backend.Lease) *mvccpb.KeyValue {
	t.Helper()
	for _, kv := range keys(t, c, prefix, ls.Name()) {
		if kv.CreateRevision == int64(ls.Token()) {
			return kv
		}
	}
	require.FailNowf(t, "no key", "no key of %q with create revision %d", ls.Name(), ls.Token())
	return nil
}

func mustParse(t testing.TB, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}

// The helpers the adapters' tests share, under this package's names.
var (
	tctx           = locktest.Ctx
	goAcquire      = locktest.Go
	waitAcquired   = locktest.Wait
	requireBlocked = locktest.RequireBlocked
	release        = locktest.Release
)
