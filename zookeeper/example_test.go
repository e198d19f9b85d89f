package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/zookeeper"
)

// A Locker over its own ZooKeeper sessions: the default TTL is the
// negotiated session timeout, the token is the lock node's czxid, and a
// second acquisition of a held lock is refused. The servers come from
// $ZOOKEEPER_SERVERS (comma-separated host:port); the package's tests point
// it at the server they start.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := zookeeper.Dial(ctx, zookeeper.Config{
		Servers:        strings.Split(os.Getenv("ZOOKEEPER_SERVERS"), ","),
		Prefix:         "/example",
		SessionTimeout: 5 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	ls, err := l.Acquire(ctx, "nightly-report")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("TTL:", ls.TTL())
	fmt.Println("token > 0:", ls.Token() > 0)

	_, err = l.TryAcquire(ctx, "nightly-report")
	fmt.Println("second TryAcquire refused:", errors.Is(err, backend.ErrNotAcquired))

	if err := ls.Release(ctx); err != nil {
		fmt.Println(err)
	}
	again, err := l.TryAcquire(ctx, "nightly-report")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("next token is greater:", again.Token() > ls.Token())
	_ = again.Release(ctx)
	// Output:
	// TTL: 5s
	// token > 0: true
	// second TryAcquire refused: true
	// next token is greater: true
}
