package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/redis"
)

// A lock on a throwaway redis-server: the holder sends its fencing token
// with every write, and a second acquisition waits for the release notice.
func Example() {
	srv, err := redistest.StartServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer client.Close() // redis.New never closes the client it is given

	locker, err := redis.New(client, backend.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	first, err := locker.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first token:", first.Token())

	_, err = locker.TryAcquire(ctx, "nightly-report")
	fmt.Println("try while held:", errors.Is(err, backend.ErrNotAcquired))

	granted := make(chan *backend.Lease)
	go func() {
		second, err := locker.Acquire(ctx, "nightly-report")
		if err != nil {
			log.Fatal(err)
		}
		granted <- second
	}()
	time.Sleep(50 * time.Millisecond) // let it wait
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	second := <-granted
	fmt.Println("second token:", second.Token())
	fmt.Println("lock key:", redis.LockKey("", "nightly-report"))
	if err := second.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// first token: 1
	// try while held: true
	// second token: 2
	// lock key: fencelock:{nightly-report}
}
