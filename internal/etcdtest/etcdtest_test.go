package etcdtest_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/tlstest"
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

func TestClientTLS(t *testing.T) {
	f := tlstest.New(t)
	s := etcdtest.Start(t, etcdtest.WithClientTLS(f))
	if ep := s.Endpoints()[0]; !strings.HasPrefix(ep, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s, want https://127.0.0.1:port", ep)
	}
	c := s.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("TLS client with a client certificate: %v", err)
	}

	// The server really requires a client certificate.
	tc, err := f.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	tc.Certificates = nil
	conn, err := tls.Dial("tcp", strings.TrimPrefix(s.Endpoints()[0], "https://"), tc)
	if err == nil {
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1)) // TLS 1.3: the refusal comes after the handshake
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without a certificate: %v, want a certificate error", err)
	}
}

// Stop and Restart keep the data and the endpoint; a client made before
// the stop works again after it.
func TestStopRestart(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put, err := c.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Stop() // idempotent
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.Get(short, "k")
	cancelShort()
	if err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" || resp.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("after restart: %v", resp.Kvs)
	}
	if err := s.Restart(); err != nil { // a running server restarts too
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "k2", "v"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Restart(); err == nil {
		t.Fatal("a closed server restarted")
	}
}

// WithAuth: the root client may do anything, a user only what its grant
// allows, and a wrong password does not authenticate.
func TestWithAuth(t *testing.T) {
	s := etcdtest.Start(t, etcdtest.WithAuth("rootpw", etcdtest.User{Name: "app", Password: "apppw", ReadWrite: []string{"locks/"}}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root := s.NewClient(t)
	if _, err := root.Put(ctx, "anything", "v"); err != nil {
		t.Fatalf("root: %v", err)
	}
	app, err := s.ClientAs("app", "apppw")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if _, err := app.Put(ctx, "locks/x", "v"); err != nil {
		t.Fatalf("app in its range: %v", err)
	}
	for _, k := range []string{"locks", "lockz", "anything"} {
		if _, err := app.Get(ctx, k); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("app reading %q: %v, want permission denied", k, err)
		}
	}
	if _, err := s.ClientAs("app", "wrong"); err == nil {
		t.Error("a wrong password authenticated")
	}
}
