package mem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/fencing"
)

// A holder that pauses past its TTL is fenced off by the resource.
func Example() {
	ctx := context.Background()
	a, _ := backend.Open(ctx, "mem://example?ttl=100ms")
	b, _ := backend.Open(ctx, "mem://example?ttl=100ms")
	defer a.Close()
	defer b.Close()
	guard := fencing.NewMemory()
	write := func(l *backend.Lease) error {
		return guard.Do(ctx, "report", l.Token(), func(context.Context) error { return nil })
	}

	leaseA, _ := a.Acquire(ctx, "report", backend.WithAutoRenew(false))
	<-leaseA.Done() // A "pauses" past its TTL: its lease is lost
	fmt.Println("A lost its lease:", errors.Is(leaseA.Err(), backend.ErrLeaseLost))

	leaseB, _ := b.Acquire(ctx, "report")
	defer leaseB.Release(ctx)
	fmt.Println("B's token is higher:", leaseB.Token() > leaseA.Token())
	fmt.Println("B writes:", write(leaseB))
	fmt.Println("A's stale write is rejected:", errors.Is(write(leaseA), fencing.ErrStaleToken))
	// Output:
	// A lost its lease: true
	// B's token is higher: true
	// B writes: <nil>
	// A's stale write is rejected: true
}
