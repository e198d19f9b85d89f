package fencing_test

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"

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

// A guard reports its decisions to the meter and tracer providers it is
// given: here the global ones, which the application sets up with the SDK
// and exporters of its choice (until it does, they record nothing). Every
// guard package has the same WithTelemetry option.
func ExampleTelemetry() {
	ctx := context.Background()
	guard := fencing.NewMemory(fencing.WithTelemetry(fencing.Telemetry{
		MeterProvider:  otel.GetMeterProvider(),
		TracerProvider: otel.GetTracerProvider(),
	}))
	for _, token := range []fencing.Token{34, 33} {
		err := guard.Do(ctx, "balance", token, func(ctx context.Context) error {
			return nil // ctx carries the "fencelock.guard.do" span
		})
		fmt.Println(token, fencing.DecisionOf(err)) // the fencelock.guard.decision attribute
	}
	// Output:
	// 34 accepted
	// 33 stale
}
