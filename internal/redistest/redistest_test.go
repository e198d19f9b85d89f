package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/tlstest"
	goredis "github.com/redis/go-redis/v9"
)

func TestStartRestartReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s := Start(t)
	c := s.NewClient(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("without persistence the key must be gone after a restart: n=%d err=%v", n, err)
	}

	p := Start(t, WithPersistence())
	pc := p.NewClient(t)
	if err := pc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := pc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("with persistence the key must survive a kill and restart: %q %v", v, err)
	}

	r := StartReplica(t, p)
	if err := pc.Set(ctx, "k2", "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := WaitReplicated(ctx, p, r); err != nil {
		t.Fatal(err)
	}
	rc := r.NewClient(t)
	if v, err := rc.Get(ctx, "k2").Result(); err != nil || v != "v2" {
		t.Fatalf("replica: %q %v", v, err)
	}
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(ctx, "k3", "v3", 0).Err(); err != nil {
		t.Fatalf("a promoted replica must accept writes: %v", err)
	}
}

func TestMissingBinaryFails(t *testing.T) {
	t.Setenv("REDIS_SERVER", "/nonexistent/redis-server")
	if _, err := StartServer(); err == nil {
		t.Fatal("StartServer with a missing binary must fail")
	}
}

func TestTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := tlstest.New(t)
	s := Start(t, WithTLS(f))
	c := s.NewClient(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("TLS client with a client certificate: %v", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("restart with TLS: %v", err)
	}
	// A new client: go-redis cannot tell a pooled TLS connection is dead.
	if err := s.NewClient(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("after restart: %v", err)
	}

	plain := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("a plain client must not reach a TLS-only server")
	}

	tc, err := f.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	tc.Certificates = nil
	nocert := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, TLSConfig: tc})
	defer nocert.Close()
	if err := nocert.Ping(ctx).Err(); err == nil {
		t.Fatal("tls-auth-clients yes: a client without a certificate must be refused")
	}
}

// A replica of a TLS primary replicates over TLS, with the client
// certificate, and counts for WAIT.
func TestTLSReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := tlstest.New(t)
	p := Start(t, WithTLS(f))
	r := StartReplica(t, p, WithTLS(f))
	pc := p.NewClient(t)
	if err := pc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := pc.Do(ctx, "WAIT", 1, 2000).Int64(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged (%v)", n, err)
	}
	if err := WaitReplicated(ctx, p, r); err != nil {
		t.Fatal(err)
	}
	if v, err := r.NewClient(t).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("replica has %q (%v)", v, err)
	}
	info, err := InfoField(ctx, r.NewClient(t), "master_link_status")
	if err != nil || info != "up" {
		t.Fatalf("master_link_status %q (%v)", info, err)
	}
}
