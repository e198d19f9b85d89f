package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/etcd"
)

// A lock on etcd: the holder sends its fencing token with every write, and a
// second acquisition waits its turn. The endpoints come from $ETCD_ENDPOINTS
// (comma-separated, e.g. http://127.0.0.1:2379); the package's tests point it
// at the server they start.
func Example() {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Getenv("ETCD_ENDPOINTS"), ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close() // etcd.New never closes the client it is given

	locker, err := etcd.New(client, etcd.Config{Prefix: "locks"}, backend.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	first, err := locker.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first holds it with a token:", first.Token() > 0)

	// The lock is held: TryAcquire fails at once.
	_, err = locker.TryAcquire(ctx, "nightly-report")
	fmt.Println("try while held:", errors.Is(err, backend.ErrNotAcquired))

	// Acquire waits until the holder releases.
	granted := make(chan *backend.Lease)
	go func() {
		second, err := locker.Acquire(ctx, "nightly-report")
		if err != nil {
			log.Fatal(err)
		}
		granted <- second
	}()
	time.Sleep(100 * time.Millisecond)
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	second := <-granted
	fmt.Println("second's token is larger:", second.Token() > first.Token())
	if err := second.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// first holds it with a token: true
	// try while held: true
	// second's token is larger: true
}

// Opening a Locker from a URL, as from configuration. The etcds scheme turns
// TLS on; cacert, cert and key name PEM files.
func Example_url() {
	locker, err := backend.Open(context.Background(),
		"etcd://10.0.0.1:2379,10.0.0.2:2379/locks?ttl=10s&dial_timeout=3s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	_ = locker // locker.Acquire(ctx, "nightly-report") ...
}
