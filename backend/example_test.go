package backend_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/backend/mem" // registers mem://; in production import etcd, zookeeper or redis
	"github.com/fencelock/fencelock/fencing"
)

// The whole life of a lock. Open a Locker by URL (mem:// is an in-process
// backend; etcd://, zk:// and redis:// take the same calls), acquire a
// lease, send its fencing token with every write, watch its loss signal,
// release it. The resource checks the token: here fencing.NewMemory, in
// production the store's own guard (fencing/sqlfence, fencing/redisfence,
// ...). Holder A below stops renewing, as a paused process would: its lease
// is lost, B gets the lock with a higher token, and A's late write is
// rejected by the resource.
func Example() {
	ctx := context.Background()
	locker, err := backend.Open(ctx, "mem://backend-example?ttl=100ms")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	guard := fencing.NewMemory() // the resource side
	write := func(lease *backend.Lease) error {
		// The work runs under lease.Context(), cancelled when the lease is
		// lost; the guard admits the write only with a token no lower than
		// any it has admitted.
		return guard.Do(lease.Context(), "report", lease.Token(), func(ctx context.Context) error {
			return nil // the write itself, under ctx
		})
	}

	// A acquires and writes. WithAutoRenew(false) plays a holder that
	// pauses: nothing renews its lease.
	a, err := locker.Acquire(ctx, "nightly-report", backend.WithAutoRenew(false))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("A holds the lock, token", a.Token())
	fmt.Println("A writes:", write(a))

	// The loss signal: Done is closed (and Context cancelled) once the TTL
	// has run out without a renewal; Err says why.
	<-a.Done()
	fmt.Println("A lost its lease:", errors.Is(a.Err(), backend.ErrLeaseLost))
	fmt.Println("A's work is cancelled:", errors.Is(context.Cause(a.Context()), backend.ErrLeaseLost))

	// B gets the lock, with a higher token, and writes.
	b, err := locker.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("B holds the lock, token", b.Token())
	fmt.Println("B writes:", write(b))

	// A wakes up and, having missed the signal, writes with its old token
	// (and not under its cancelled Context): the resource rejects it.
	err = guard.Do(ctx, "report", a.Token(), func(context.Context) error { return nil })
	fmt.Println("A's late write:", err)

	// Release gives the lock up; the loss signal fires with ErrReleased.
	if err := b.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("B released:", errors.Is(b.Err(), backend.ErrReleased))
	// Output:
	// A holds the lock, token 1
	// A writes: <nil>
	// A lost its lease: true
	// A's work is cancelled: true
	// B holds the lock, token 2
	// B writes: <nil>
	// A's late write: fencing: stale token 1 for "report": token 2 was already admitted
	// B released: true
}
