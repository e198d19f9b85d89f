package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/redis"
)

// A lock on Redis: the holder sends its fencing token with every write, and
// a second acquisition waits for the release notice. The server's address
// comes from $REDIS_ADDR (e.g. 127.0.0.1:6379); the package's tests point it
// at the server they start.
func Example() {
	client := goredis.NewClient(&goredis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close() // redis.New never closes the client it is given

	locker, err := redis.New(client, redis.Config{}, backend.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	first, err := locker.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	// Tokens are raised to the server's clock in microseconds (the clock
	// floor), so they never go back, even if the counter is lost.
	fmt.Println("first token above 1e15:", first.Token() > 1e15)

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
	fmt.Println("second token greater:", second.Token() > first.Token())
	fmt.Println("lock key:", redis.LockKey("", "nightly-report"))
	if err := second.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// first token above 1e15: true
	// try while held: true
	// second token greater: true
	// lock key: fencelock:{nightly-report}
}
