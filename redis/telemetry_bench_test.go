package redis

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/lockbench"
	"github.com/fencelock/fencelock/internal/redistest"
)

// telemetryImpl is one telemetry setting of BenchmarkTelemetryOverhead:
// opts returns the Locker's options (providers of its own per
// sub-benchmark, shut down when it ends).
type telemetryImpl struct {
	name string
	opts func(b *testing.B) []backend.Option
}

var telemetryImpls = []telemetryImpl{
	{"off", func(*testing.B) []backend.Option { return nil }},
	{"metrics", func(b *testing.B) []backend.Option {
		return []backend.Option{backend.WithMeterProvider(benchMeterProvider(b))}
	}},
	{"metrics+traces", func(b *testing.B) []backend.Option {
		return []backend.Option{
			backend.WithMeterProvider(benchMeterProvider(b)),
			backend.WithTracerProvider(benchTracerProvider(b)),
		}
	}},
}

// benchMeterProvider is an SDK MeterProvider over a manual reader.
func benchMeterProvider(b *testing.B) *sdkmetric.MeterProvider {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp
}

// benchTracerProvider is the SDK TracerProvider of a production app: the
// default sampler (ParentBased(AlwaysSample): every span of the benchmark,
// a root, is sampled and recorded) and a BatchSpanProcessor with its
// default options, which copies each ended span and queues it for an
// exporter on its own goroutine. The exporter discards the batches: what
// a real one does with them (encode, send) happens off the lock's path.
func benchTracerProvider(b *testing.B) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// BenchmarkTelemetryOverhead is BenchmarkUncontended's fencelock case (one
// acquire+release of a free lock on a real redis-server) with telemetry
// off, with metrics (an SDK MeterProvider over a manual reader) and with
// metrics and traces (plus an SDK TracerProvider as production runs it: the
// default sampler, a BatchSpanProcessor), in alternating rounds:
// round=R/impl=off|metrics|metrics+traces.
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
	l, err := backend.New(d, append([]backend.Option{backend.WithTTL(benchTTL)}, impl.opts(b)...)...)
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
