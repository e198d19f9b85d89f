package redisfence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/redisfence"
)

// A fenced write to Redis: the write function stages its commands on the
// Batch it is given, and they are applied in the script that checks the
// token, or not at all. The client may retry (go-redis's default): a
// retried script reports what its first run did. (Not run: it needs a
// Redis server.)
func ExampleGuard_Do() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // MaxRetries: 3
	g, err := redisfence.New(rdb)
	if err != nil {
		panic(err)
	}
	var token fencing.Token = 34 // lease.Token() of the lock held for "report"
	err = g.Do(ctx, "report", token, func(ctx context.Context, b *redisfence.Batch) error {
		// Keys share the resource's hash tag, for Redis Cluster.
		b.Set("{report}:body", "the report")
		b.HSet("{report}:meta", "written-by", token.String())
		return nil
	})
	var stale *fencing.StaleTokenError
	switch {
	case errors.As(err, &stale):
		fmt.Printf("token %d lost to %d: nothing was written\n", stale.Token, stale.Highest)
	case errors.Is(err, fencing.ErrOutcomeUnknown):
		// The answer was lost: the report may or may not be there. Read
		// it back rather than assume either.
		written, _ := rdb.HGet(ctx, "{report}:meta", "written-by").Result()
		fmt.Println("written:", written == token.String())
	}
}
