package election_test

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/election"
)

// Two replicas campaign; the second leads once the first resigns, with a
// higher term number, and an observer sees both terms in order.
func Example() {
	ctx := context.Background()
	a, _ := backend.Open(ctx, "mem://example-election?ttl=2s")
	b, _ := backend.Open(ctx, "mem://example-election?ttl=2s")
	defer a.Close()
	defer b.Close()
	ea, _ := election.New(a)
	eb, _ := election.New(b)

	watch, cancel := context.WithCancel(ctx)
	defer cancel()
	changes, _ := eb.Observe(watch, "scheduler")
	first := <-changes
	fmt.Println("leader at first:", first.Leader)

	termA, _ := ea.Campaign(ctx, "scheduler", "10.0.0.1:8080")
	fmt.Println("A leads:", (<-changes).Leader.Value)

	campaignB := make(chan *election.Term)
	go func() {
		t, _ := eb.Campaign(ctx, "scheduler", "10.0.0.2:8080")
		campaignB <- t
	}()
	_ = termA.Resign(ctx) // B is granted the next term at once
	termB := <-campaignB
	defer termB.Resign(ctx)
	seen := (<-changes).Leader
	fmt.Println("B leads:", seen.Value)
	fmt.Println("B's term is later:", termB.Token() > termA.Token(), seen.Token == termB.Token())
	// Output:
	// leader at first: <nil>
	// A leads: 10.0.0.1:8080
	// B leads: 10.0.0.2:8080
	// B's term is later: true true
}
