// Command observe is a small service whose locks and fencing guard report
// OpenTelemetry metrics, served in the Prometheus text format at
// http://ADDR/metrics through the OTel Prometheus exporter.
//
// A few workers take the locks "orders" and "billing" in turn, hold each
// for a random while (long enough, now and then, for the lease to be
// renewed) and write through an in-memory fencing guard. A straggler now
// and then takes "reports" with a short TTL and no renewal, stalls past it
// (the lease is lost: cause expired) and then writes with its old token:
// the guard rejects it as stale once a worker has written with a newer one.
// So every instrument of docs/observability.md's dashboards has something to show.
//
//	go run ./examples/observe                     # mem://, metrics on 127.0.0.1:9464
//	go run ./examples/observe -url etcd://127.0.0.1:2379/locks?ttl=2s -metrics-addr :9464
//	curl -s 127.0.0.1:9464/metrics | grep ^fencelock_
//
// It runs until SIGINT or SIGTERM, or for -duration.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"

	// The adapters, imported for the URL schemes they register.
	_ "github.com/fencelock/fencelock/backend/mem" // mem://
	_ "github.com/fencelock/fencelock/etcd"        // etcd://, etcds://
	_ "github.com/fencelock/fencelock/postgres"    // postgres://, postgresql://
	_ "github.com/fencelock/fencelock/redis"       // redis://, rediss://
	_ "github.com/fencelock/fencelock/zookeeper"   // zk://, zks://
)

// Config is what the service runs with.
type Config struct {
	URL          string        // backend URL
	MetricsAddr  string        // where /metrics is served
	Workers      int           // goroutines taking "orders" and "billing"
	MaxHold      time.Duration // a worker holds a lock up to this long
	StragglerTTL time.Duration // the straggler's TTL on "reports"
	Every        time.Duration // the straggler stalls once per Every
}

func main() {
	var c Config
	flag.StringVar(&c.URL, "url", cmp.Or(os.Getenv("FENCELOCK_URL"), "mem://observe?ttl=1s"), "backend URL (default $FENCELOCK_URL, else the in-process mem://observe?ttl=1s)")
	flag.StringVar(&c.MetricsAddr, "metrics-addr", "127.0.0.1:9464", "serve the metrics at http://ADDR/metrics")
	flag.IntVar(&c.Workers, "workers", 4, "workers taking the locks")
	flag.DurationVar(&c.MaxHold, "max-hold", 600*time.Millisecond, "the longest a worker holds a lock (renewals show when it passes TTL/3)")
	flag.DurationVar(&c.StragglerTTL, "straggler-ttl", 2*time.Second, "the straggler's TTL (etcd: whole seconds)")
	flag.DurationVar(&c.Every, "every", 5*time.Second, "how often the straggler stalls")
	duration := flag.Duration("duration", 0, "stop after this long; 0 runs until SIGINT or SIGTERM")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	s, err := Start(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "observe:", err)
		os.Exit(1)
	}
	fmt.Printf("metrics at http://%s/metrics\n", s.Addr())
	if err := s.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, "observe:", err)
		os.Exit(1)
	}
}

// Service is the running service.
type Service struct {
	addr     string
	server   *http.Server
	provider *sdkmetric.MeterProvider
	locker   *backend.Locker
	wg       sync.WaitGroup
	mu       sync.Mutex
	err      error // the first error a worker met
}

// Start serves the metrics on c.MetricsAddr, opens the Locker with the
// meter provider that feeds them, and starts the workers and the straggler,
// which run until ctx ends.
func Start(ctx context.Context, c Config) (*Service, error) {
	if c.Workers < 1 || c.MaxHold < time.Millisecond || c.StragglerTTL <= 0 || c.Every <= 0 {
		return nil, errors.New("-workers must be at least 1, -max-hold at least 1ms, -straggler-ttl and -every positive")
	}
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	ln, err := net.Listen("tcp", c.MetricsAddr)
	if err != nil {
		return nil, err
	}
	locker, err := backend.Open(ctx, c.URL,
		backend.WithMeterProvider(provider),
		// Three fixed names: few enough to be a series each (for wait p99
		// per lock).
		backend.WithLockNameAttribute(true))
	if err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	s := &Service{
		addr: ln.Addr().String(), provider: provider, locker: locker,
		server: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
	}
	go func() { _ = s.server.Serve(ln) }()

	guard := fencing.NewMemory(fencing.WithTelemetry(fencing.Telemetry{MeterProvider: provider}))
	for i := range c.Workers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.worker(ctx, guard, []string{"orders", "billing", "reports"}[i%3], c.MaxHold)
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.straggler(ctx, guard, c.StragglerTTL, c.Every)
	}()
	return s, nil
}

// Addr is the address /metrics is served on.
func (s *Service) Addr() string { return s.addr }

// fail keeps the first error that is not the end of the service.
func (s *Service) fail(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = cmp.Or(s.err, err)
}

// worker takes lock name again and again, holds it up to maxHold, and
// writes through the guard with its token.
func (s *Service) worker(ctx context.Context, guard *fencing.Memory, name string, maxHold time.Duration) {
	for ctx.Err() == nil {
		lease, err := s.locker.Acquire(ctx, name)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		select {
		case <-time.After(rand.N(maxHold) + 1):
		case <-lease.Done():
		case <-ctx.Done():
		}
		err = guard.Do(lease.Context(), name, lease.Token(), func(context.Context) error { return nil })
		if !errors.Is(err, fencing.ErrStaleToken) && lease.Err() == nil {
			s.fail(ctx, err)
		}
		if err := lease.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, backend.ErrLeaseLost) {
			s.fail(ctx, err)
		}
		time.Sleep(rand.N(maxHold/4) + 1)
	}
}

// straggler takes "reports" once per every with a TTL of ttl and no
// renewal, stalls past its deadline, and writes late with its token: a
// stale write once a worker wrote after it.
func (s *Service) straggler(ctx context.Context, guard *fencing.Memory, ttl, every time.Duration) {
	for ctx.Err() == nil {
		lease, err := s.locker.Acquire(ctx, "reports", backend.WithTTL(ttl), backend.WithAutoRenew(false))
		if errors.Is(err, backend.ErrLeaseLost) && !errors.Is(err, backend.ErrUnavailable) {
			// Unrenewed, its lease can end while it waits behind a
			// worker (a stalled process): it tries again.
			continue
		}
		if err != nil {
			s.fail(ctx, err)
			return
		}
		select {
		case <-lease.Done(): // lost: its local deadline passed unrenewed (expired)
		case <-ctx.Done():
			_ = lease.Release(context.WithoutCancel(ctx))
			return
		}
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return
		}
		// The late write: rejected as stale if a worker wrote "reports"
		// with a newer token meanwhile (there is one on "reports").
		err = guard.Do(ctx, "reports", lease.Token(), func(context.Context) error { return nil })
		if err != nil && !errors.Is(err, fencing.ErrStaleToken) {
			s.fail(ctx, err)
		}
	}
}

// Wait waits for the workers to end with the context Start was given,
// stops serving and closes the Locker. It returns the first error a worker
// met, if any.
func (s *Service) Wait() error {
	s.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.server.Shutdown(ctx)
	_ = s.locker.Close()
	_ = s.provider.Shutdown(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
