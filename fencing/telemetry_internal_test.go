package fencing

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Telemetry off costs no allocation: Memory.Do allocates what its
// uninstrumented body (do, the whole Do before telemetry) allocates, and
// the observation every guard wraps its Do in allocates nothing.
func TestTelemetryOffAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	write := func(context.Context) error { return nil }
	for name, m := range map[string]*Memory{"NewMemory()": NewMemory(), "zero Memory": {}, "WithTelemetry(Telemetry{})": NewMemory(WithTelemetry(Telemetry{}))} {
		if m.tel != nil {
			t.Fatalf("%s: instruments without a provider", name)
		}
		if err := m.Do(ctx, "r", 2, write); err != nil {
			t.Fatal(err)
		}
		before := testing.AllocsPerRun(1000, func() { _ = m.do(ctx, "r", 2, write) })
		off := testing.AllocsPerRun(1000, func() { _ = m.Do(ctx, "r", 2, write) })
		staleBefore := testing.AllocsPerRun(1000, func() { _ = m.do(ctx, "r", 1, write) })
		stale := testing.AllocsPerRun(1000, func() { _ = m.Do(ctx, "r", 1, write) })
		t.Logf("%s: Do allocates %v (uninstrumented %v); a stale token %v (uninstrumented %v: the *StaleTokenError)", name, off, before, stale, staleBefore)
		if off != before || stale != staleBefore {
			t.Errorf("%s: telemetry off adds allocations to Do", name)
		}
	}
	var in *Instruments
	if n := testing.AllocsPerRun(1000, func() {
		ctx, obs := in.Start(ctx, "r", 1)
		_ = ctx
		obs.End(ErrStaleToken)
	}); n != 0 {
		t.Errorf("a nil *Instruments' Start and End allocate %v times, want 0", n)
	}
}

// A span the sampler drops costs Do only the SDK's Start and End: no
// attribute is built for it.
func TestTelemetryUnsampledSpanAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	write := func(context.Context) error { return nil }
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	defer tp.Shutdown(ctx)
	tracer := tp.Tracer("sdk")
	perSpan := testing.AllocsPerRun(1000, func() {
		_, span := tracer.Start(ctx, "s")
		span.End()
	})
	m := NewMemory(WithTelemetry(Telemetry{TracerProvider: tp}))
	before := testing.AllocsPerRun(1000, func() { _ = m.do(ctx, "r", 2, write) })
	if n := testing.AllocsPerRun(1000, func() { _ = m.Do(ctx, "r", 2, write) }); n != before+perSpan {
		t.Errorf("Do with its span dropped allocates %v times, want %v (uninstrumented) + %v (the SDK's span)", n, before, perSpan)
	}
}

// BenchmarkMemoryDo shows what each part of the telemetry costs a Do, with
// the SDK (a manual reader; the default sampler and a BatchSpanProcessor,
// as in production, in front of an exporter that discards): off is the
// uninstrumented Do.
func BenchmarkMemoryDo(b *testing.B) {
	ctx := context.Background()
	write := func(context.Context) error { return nil }
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = mp.Shutdown(ctx); _ = tp.Shutdown(ctx) })
	for _, c := range []struct {
		name string
		tel  Telemetry
	}{
		{"off", Telemetry{}},
		{"metrics", Telemetry{MeterProvider: mp}},
		{"metrics+spans", Telemetry{MeterProvider: mp, TracerProvider: tp}},
		{"metrics+spans+resources", Telemetry{MeterProvider: mp, TracerProvider: tp, ResourceNames: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := NewMemory(WithTelemetry(c.tel))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_ = m.Do(ctx, "r", 1, write)
			}
		})
	}
}
