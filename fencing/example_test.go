package fencing_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fencing"
)

// The resource side: every write carries the writer's token, and a write
// with a lower token than one already admitted is rejected.
func ExampleMemory() {
	ctx := context.Background()
	guard := fencing.NewMemory()
	var balance int
	write := func(token fencing.Token, v int) error {
		return guard.Do(ctx, "balance", token, func(context.Context) error {
			balance = v // runs only if token is not stale, atomically with the check
			return nil
		})
	}
	fmt.Println(write(34, 100)) // the current holder
	err := write(33, 0)         // a paused former holder wakes up
	fmt.Println(errors.Is(err, fencing.ErrStaleToken), balance)
	fmt.Println(err)
	// Output:
	// <nil>
	// true 100
	// fencing: stale token 33 for "balance": token 34 was already admitted
}
