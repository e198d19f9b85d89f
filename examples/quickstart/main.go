// Command quickstart opens a backend by URL, takes a lock, and writes to a
// fenced resource with the lease's token; a second writer with an older token
// is turned away.
//
//	go run ./examples/quickstart                       # in-process backend
//	go run ./examples/quickstart -url etcd://127.0.0.1:2379/locks
//	go run ./examples/quickstart -url zk://127.0.0.1:2181/locks
//	go run ./examples/quickstart -url redis://127.0.0.1:6379?prefix=locks
//
// A backend is available to backend.Open once its adapter package is
// imported, as database/sql drivers are; this example imports all of them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"

	// The adapters, imported for the URL schemes they register.
	_ "github.com/fencelock/fencelock/backend/mem" // mem://
	_ "github.com/fencelock/fencelock/etcd"        // etcd://, etcds://
	_ "github.com/fencelock/fencelock/postgres"    // postgres://, postgresql://
	_ "github.com/fencelock/fencelock/redis"       // redis://, rediss://
	_ "github.com/fencelock/fencelock/zookeeper"   // zk://, zks://
)

func main() {
	url := flag.String("url", "mem://", "backend URL: mem://, etcd://host:2379/prefix, zk://host:2181/prefix, redis://host:6379?prefix=p")
	flag.Parse()
	if err := run(context.Background(), *url, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	locker, err := backend.Open(ctx, url)
	if err != nil {
		return err
	}
	defer locker.Close()

	guard := fencing.NewMemory() // the resource side: a database keeps this in the row
	write := func(token fencing.Token, text string) error {
		return guard.Do(ctx, "greeting", token, func(context.Context) error {
			fmt.Fprintf(out, "resource: wrote %q under token %s\n", text, token)
			return nil
		})
	}

	var tokens []fencing.Token
	for _, text := range []string{"hello", "hello again"} {
		lease, err := locker.Acquire(ctx, "quickstart")
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "acquired %q with token %s\n", lease.Name(), lease.Token())
		tokens = append(tokens, lease.Token())
		err = write(lease.Token(), text)
		if rerr := lease.Release(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
	}
	// A writer still carrying the first grant's token is turned away.
	fmt.Fprintln(out, "late write with the first token:", write(tokens[0], "stale"))
	return nil
}
