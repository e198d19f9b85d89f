// Command quickstart opens a backend by URL, takes a lock, and writes to a
// fenced resource with the lease's token; a second writer with an older token
// is turned away.
//
//	go run ./examples/quickstart                       # in-process backend
//	go run ./examples/quickstart -url etcd://127.0.0.1:2379/locks
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/backend/mem"
	_ "github.com/fencelock/fencelock/etcd"
	"github.com/fencelock/fencelock/fencing"
)

func main() {
	url := flag.String("url", "mem://", "backend URL (mem://, etcd://host:2379/prefix)")
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
