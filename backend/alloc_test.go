package backend

import (
	"context"
	"errors"
	"runtime/debug"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

// syncDriver grants every lock at once and starts no goroutine, so that
// the allocations of an acquisition are the same on every run.
type syncDriver struct{ token fencing.Token }

func (d *syncDriver) Capabilities() driver.Capabilities { return driver.Capabilities{Name: "sync"} }
func (d *syncDriver) CheckTTL(time.Duration) error      { return nil }
func (d *syncDriver) NewLease(context.Context, driver.Request) (driver.Lease, time.Time, error) {
	d.token++
	return (*syncLease)(d), time.Now(), nil
}
func (d *syncDriver) Inspect(context.Context, string) (driver.Status, error) {
	return driver.Status{}, errors.ErrUnsupported
}
func (d *syncDriver) Revoke(context.Context, string, fencing.Token) (bool, error) {
	return false, errors.ErrUnsupported
}
func (d *syncDriver) RevokeID(context.Context, string, string) (bool, error) {
	return false, errors.ErrUnsupported
}
func (d *syncDriver) Shutdown(context.Context) error { return nil }

type syncLease syncDriver

func (l *syncLease) Lock(context.Context, bool) (driver.Grant, error) {
	return driver.Grant{Token: l.token}, nil
}
func (l *syncLease) KeepAlive(context.Context) (time.Time, error) { return time.Now(), nil }
func (l *syncLease) Release(context.Context, bool) error          { return nil }
func (l *syncLease) Suspended() (bool, <-chan struct{})           { return false, nil }
func (l *syncLease) Proclaim(context.Context, string) error       { return nil }

// allocsAtBase is what an Acquire+Release over syncDriver allocated before
// telemetry and hold times were added (57bb688, measured with this test's
// loop): with telemetry off they must add nothing.
const allocsAtBase = 9

// acquireReleaseAllocs returns the allocations of one Acquire (wait) or
// TryAcquire and its Release through l, on average (GC off: a collection
// empties sync.Pools).
func acquireReleaseAllocs(t *testing.T, l *Locker, wait bool) float64 {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	ctx := context.Background()
	return testing.AllocsPerRun(1000, func() {
		ls, err := l.acquire(ctx, "alloc", wait, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Telemetry off (the default) adds no allocation to the lock path, hold
// times included.
func TestTelemetryOffAllocatesNothing(t *testing.T) {
	l, err := New(&syncDriver{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, wait := range []bool{true, false} {
		if n := acquireReleaseAllocs(t, l, wait); n != allocsAtBase {
			t.Errorf("wait=%v: %v allocations per Acquire+Release with telemetry off, %d before telemetry", wait, n, allocsAtBase)
		}
	}
	if h, ok := l.HoldTimes("alloc"); !ok || h.Count < 2000 {
		t.Errorf("hold times %+v, %v: the holds were not measured", h, ok)
	}
}

// With metrics on (the SDK, a manual reader) the lock path allocates no
// more either: the attribute sets are made once, at New.
func TestTelemetryMetricsAllocateNothing(t *testing.T) {
	l, err := New(&syncDriver{}, WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, wait := range []bool{true, false} {
		if n := acquireReleaseAllocs(t, l, wait); n != allocsAtBase {
			t.Errorf("wait=%v: %v allocations per Acquire+Release with metrics on, %d before telemetry", wait, n, allocsAtBase)
		}
	}
}

// Spans the sampler drops cost the lock path nothing but the SDK's own
// Start and End of each (fencelock.acquire and fencelock.release): no
// attribute, event or option is built for them.
func TestTelemetryUnsampledSpansAllocateNothing(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	defer tp.Shutdown(context.Background())
	ctx := context.Background()
	tracer := tp.Tracer("sdk")
	perSpan := testing.AllocsPerRun(1000, func() {
		_, span := tracer.Start(ctx, "s")
		span.End()
	})
	l, err := New(&syncDriver{}, WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, wait := range []bool{true, false} {
		if n := acquireReleaseAllocs(t, l, wait); n != allocsAtBase+2*perSpan {
			t.Errorf("wait=%v: %v allocations per Acquire+Release with its spans dropped, want %d before telemetry + 2 spans of the SDK's %v",
				wait, n, allocsAtBase, perSpan)
		}
	}
}

// BenchmarkTelemetryPath is the shared layer's own cost of an
// Acquire+Release, over a driver that does no work, with telemetry off
// and on (the SDK: a manual reader; a tracer provider as production runs
// it, the default sampler and a BatchSpanProcessor, here in front of an
// exporter that discards the batches).
func BenchmarkTelemetryPath(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"off", nil},
		{"metrics", []Option{WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))}},
		{"metrics+traces", []Option{WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))),
			WithTracerProvider(tp)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := New(&syncDriver{}, c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				ls, err := l.Acquire(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTelemetrySDKSpans is the floor under BenchmarkTelemetryPath's
// metrics+traces, on the same provider setup, with no lock and no metric:
// empty, one span started and ended with nothing on it; acquire+release,
// the SDK calls alone that the spans of an Acquire+Release make
// (fencelock.acquire with its events queued and granted and its
// attributes in one call, fencelock.release with its own).
func BenchmarkTelemetrySDKSpans(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	t := newTelemetry("sync", &observeOptions{tracers: tp})
	ctx := context.Background()
	b.Run("empty", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, span := t.tracer.Start(ctx, "empty")
			span.End()
		}
	})
	b.Run("acquire+release", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, span := t.tracer.Start(ctx, "fencelock.acquire")
			span.AddEvent("queued")
			span.AddEvent("granted")
			span.SetAttributes(t.backend, t.waitAttrs[1], attribute.Int64(attrToken, 1), t.grantedAttr)
			span.End()
			_, span = t.tracer.Start(ctx, "fencelock.release")
			span.SetAttributes(t.backend, attribute.Int64(attrToken, 1))
			span.End()
		}
	})
}
