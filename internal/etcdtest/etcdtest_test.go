package etcdtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/etcdtest"
)

func TestStartPutGet(t *testing.T) {
	start := time.Now()
	s := etcdtest.Start(t)
	t.Logf("started in %v at %v", time.Since(start), s.Endpoints())
	c := s.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("got %v", resp.Kvs)
	}
}

func TestStartServerTwoAtOnce(t *testing.T) {
	a, err := etcdtest.StartServer("")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := etcdtest.StartServer("")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Endpoints()[0] == b.Endpoints()[0] {
		t.Fatalf("same endpoint %v", a.Endpoints())
	}
	a.Close()
	a.Close() // idempotent
}
