package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// thirdPartyMarks are what the backend clients' own log lines start with or
// contain: go-redis ("redis: " and its pool's words), go-zookeeper, etcd's
// zap logger (JSON), gRPC.
var thirdPartyMarks = []string{"redis: ", "connection pool", "zk: ", "Connected to", "connected to", "recv loop", "send loop",
	"failed to connect", `{"level"`, "[core]", "grpc: ", "pgx"}

// While its backend's server is stopped and started again, the binary's
// stderr holds only fencelock's own lines: leader --watch goes on through
// the outage and run loses its lease, and no backend client adds a line
// of its own.
func TestNoClientLogsOnStderr(t *testing.T) {
	t.Parallel() // long, and on servers of its own
	for _, c := range []struct {
		name  string
		start func(t *testing.T) (url string, stop func(), restart func() error)
	}{
		{"etcd", func(t *testing.T) (string, func(), func() error) {
			srv := etcdtest.Start(t)
			return etcdURL(srv, "clientlog") + "&dial_timeout=5s", srv.Stop, srv.Restart
		}},
		{"zookeeper", func(t *testing.T) (string, func(), func() error) {
			srv := zktest.Start(t)
			return "zk://" + srv.Addr() + "/clientlog?ttl=2s", srv.Stop, srv.Restart
		}},
		{"redis", func(t *testing.T) (string, func(), func() error) {
			srv := redistest.Start(t)
			return "redis://" + srv.Addr() + "?prefix=clientlog&ttl=2s&dial_timeout=5s", srv.Stop, srv.Restart
		}},
		{"postgres", func(t *testing.T) (string, func(), func() error) {
			srv := pgtest.Start(t)
			restart := func() error { srv.Restart(t); return nil }
			return srv.NewDatabase(t) + "&prefix=clientlog&ttl=2s&connect_timeout=5", srv.Stop, restart
		}},
	} { // dial timeouts of 5s: a busy machine can take over 1s to connect at the start
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a server of its own
			url, stop, restart := c.start(t)
			dir := t.TempDir()
			watch := startLive(t, true, "leader", "--url", url, "--watch", "clientlog")
			// Its first line says it has reached the server: a watch that
			// cannot reach it at start ends (exit 69) rather than wait.
			waitLine(t, watch.out.String, 0, `\S`)
			held := startBinary(t, "run", "--url", url, "--lock", "clientlog", "--grace", "300ms", "--",
				"sh", "-c", `trap 'touch "$1/stopped"; exit 0' TERM; touch "$1/held"; while :; do sleep 0.05; done`, "sh", dir)
			waitFile(t, dir+"/held", held)
			stop()
			waitFile(t, dir+"/stopped", held) // the lease is lost
			time.Sleep(2 * time.Second)       // the clients retry meanwhile
			require.NoError(t, restart())
			r := held.wait(t) // run releases once the server is back
			assert.NotEqual(t, exitOK, r.code, "%+v", r)
			time.Sleep(2 * time.Second) // the watch's clients reconnect
			select {
			case w := <-watch.done: // it must go on through the outage
				t.Fatalf("leader --watch ended before it was signalled: %+v", w)
			default:
			}
			require.NoError(t, watch.cmd.Process.Signal(syscall.SIGTERM))
			w := watch.wait(t)
			assert.Equal(t, exitOK, w.code, "%+v", w)
			for _, r := range []runResult{r, w} {
				t.Logf("stderr:\n%s", r.stderr)
				for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
					if l == "" {
						continue
					}
					assert.Regexp(t, `^fencelock (run|leader): `, l)
					for _, m := range thirdPartyMarks {
						assert.NotContains(t, l, m)
					}
				}
			}
		})
	}
}
