package redis

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
	"github.com/fencelock/fencelock/internal/redistest"
)

// telemetryImpl is one telemetry setting of BenchmarkTelemetryOverhead:
// opts returns the Locker's options (a provider of its own per
// sub-benchmark).
type telemetryImpl struct {
	name string
	opts func() []backend.Option
}

var telemetryImpls = []telemetryImpl{
	{"off", func() []backend.Option { return nil }},
	{"metrics", func() []backend.Option {
		return []backend.Option{backend.WithMeterProvider(
			sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))}
	}},
	{"metrics+traces", func() []backend.Option {
		// The spans are sampled and recorded; no processor keeps them.
		return []backend.Option{
			backend.WithMeterProvider(
				sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))),
			backend.WithTracerProvider(sdktrace.NewTracerProvider()),
		}
	}},
}

// BenchmarkTelemetryOverhead is BenchmarkUncontended's fencelock case (one
// acquire+release of a free lock on a real redis-server) with telemetry
// off, with metrics (an SDK MeterProvider over a manual reader) and with
// metrics and traces (plus an SDK TracerProvider with no exporter), in
// alternating rounds: round=R/impl=off|metrics|metrics+traces.
//
//	FENCELOCK_BENCH_ROUNDS=6 go test -run '^$' -bench '^BenchmarkTelemetryOverhead$' -benchtime 2000x -benchmem ./redis/ | tee telbench.txt
//	benchstat -col /impl -ignore /round telbench.txt
func BenchmarkTelemetryOverhead(b *testing.B) {
	s := benchServer(b)
	lockbench.Interleave(b, telemetryImpls, func(i telemetryImpl) string { return i.name },
		func(b *testing.B, impl telemetryImpl) {
			c := telemetryContender(b, s, impl, benchPrefix(), "uncontended")
			lockbench.BenchUncontended(b, c, 20, serverUsage(b, s))
		})
}

func telemetryContender(b *testing.B, s *redistest.Server, impl telemetryImpl, prefix, name string) lockbench.Contender {
	d, err := newDriver(benchClient(b, s), Config{Prefix: prefix}, nil)
	if err != nil {
		b.Fatal(err)
	}
	l, err := backend.New(d, append([]backend.Option{backend.WithTTL(benchTTL)}, impl.opts()...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	var ls *backend.Lease
	return lockbench.Contender{
		Lock:   func(ctx context.Context) (err error) { ls, err = l.Acquire(ctx, name); return err },
		Unlock: func(ctx context.Context) error { return ls.Release(ctx) },
	}
}
