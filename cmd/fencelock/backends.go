package main

// Every backend adapter of the module registers its URL schemes here, once
// for the whole command, so that run, status, bench, demo --url and
// conformance accept the same URLs. TestEveryAdapterRegistered fails when an
// adapter package of the module registers a scheme that is missing here.
import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	_ "github.com/fencelock/fencelock/backend/mem" // mem://
	_ "github.com/fencelock/fencelock/etcd"        // etcd://, etcds://
	_ "github.com/fencelock/fencelock/postgres"    // postgres://, postgresql://
	_ "github.com/fencelock/fencelock/redis"       // redis://, rediss://
	_ "github.com/fencelock/fencelock/zookeeper"   // zk://, zks://
)

// discardLogger drops go-redis's log lines. go-redis logs to os.Stderr on
// its own (a connection pool that cannot dial, among others), which would
// interleave with the command's one-line errors; whatever matters reaches
// the command as an error anyway.
type discardLogger struct{}

// Printf implements go-redis's internal Logging interface.
func (discardLogger) Printf(context.Context, string, ...any) {}

// quietClientLogs keeps the backend clients' own logging off the user's
// terminal. The adapters already keep the lines of the clients they open
// for a URL off os.Stderr (TestNoClientLogsOnStderr); go-redis's logger is
// process-wide, and the command, a program, turns it off for every client
// it may make itself too.
func quietClientLogs() {
	goredis.SetLogger(discardLogger{})
}
