package etcdfence_test

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/etcdfence"
)

// A fenced write to etcd: the write function stages its operations on the
// Txn it is given, with the condition that the lock is still this grant's;
// they are applied in the etcd transaction that checks the token, or not at
// all. (Not run: it needs an etcd cluster.)
func ExampleGuard_Do() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	g, err := etcdfence.New(cli, etcdfence.WithPrefix("/fences/"))
	if err != nil {
		panic(err)
	}
	// The lock's key and token, e.g. from an etcd concurrency.Mutex:
	// m.Key() and m.Header().Revision.
	lockKey, token := "/locks/report/694d7a1b2c", fencing.Token(34)
	err = g.Do(ctx, "report", token, func(ctx context.Context, t *etcdfence.Txn) error {
		t.If(etcdfence.HeldBy(lockKey, token))
		t.Put("/reports/daily", "the report")
		return nil
	})
	var stale *fencing.StaleTokenError
	switch {
	case errors.As(err, &stale):
		fmt.Printf("token %d lost to %d: nothing was written\n", stale.Token, stale.Highest)
	case errors.Is(err, etcdfence.ErrConditionFailed):
		fmt.Println("the lock was lost: nothing was written")
	}
}
