package servers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance/servers"
)

// A test starts a 3-member etcd cluster (via Docker, or the cluster named
// by $FENCELOCK_ETCD_URL), takes a lock, kills a member and takes the lock
// again: two members keep the quorum.
func Example() {
	testEtcdQuorum := func(t *testing.T) {
		s := servers.Start(t, servers.Etcd, servers.Cluster) // removed when t ends
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		lock := func() {
			l, err := backend.Open(ctx, s.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lease, err := l.Acquire(ctx, "report")
			if err != nil {
				t.Fatal(err)
			}
			fmt.Println("token", lease.Token())
			_ = lease.Release(ctx)
		}
		lock()
		if len(s.Members) > 0 { // External servers have no members
			if err := s.Members[0].Kill(ctx); err != nil {
				t.Fatal(err)
			}
			lock()
			if err := s.Members[0].Restart(ctx); err != nil { // same data, same port
				t.Fatal(err)
			}
		}
	}
	_ = testEtcdQuorum // func TestEtcdQuorum(t *testing.T) { … } in a _test.go file
}
