package fencetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/fencing"
)

// Recorder is a real OpenTelemetry SDK pipeline for one test: a meter
// provider read by a ManualReader and a tracer provider whose spans a
// SpanRecorder keeps. Guards report to it through Telemetry.
type Recorder struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	mp     *sdkmetric.MeterProvider
	tp     *sdktrace.TracerProvider
}

// NewRecorder returns a Recorder, shut down when t ends.
func NewRecorder(t *testing.T) *Recorder {
	r := &Recorder{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	r.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() {
		_ = r.mp.Shutdown(context.Background())
		_ = r.tp.Shutdown(context.Background())
	})
	return r
}

// Telemetry returns the fencing.Telemetry that reports to r, with resource
// names as attributes if resourceNames.
func (r *Recorder) Telemetry(resourceNames bool) fencing.Telemetry {
	return fencing.Telemetry{MeterProvider: r.mp, TracerProvider: r.tp, ResourceNames: resourceNames}
}

// Observed is one Do a guard is expected to have reported.
type Observed struct {
	// Decision is the fencelock.guard.decision attribute expected.
	Decision fencing.Decision
	// Token is the fencelock.token the Do's span is expected to carry.
	Token fencing.Token
	// Resource is the fencelock.guard.resource attribute expected ("": none).
	Resource string
}

// Spans returns the ended "fencelock.guard.do" spans of guard kind kind,
// in the order they ended.
func (r *Recorder) Spans(kind string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == fencing.SpanName && slices.Contains(s.Attributes(), fencing.KindKey.String(kind)) {
			out = append(out, s)
		}
	}
	return out
}

// Expect checks that the guard of kind kind reported exactly want, in
// order: one span each, with the kind, the token, the decision and (for a
// decision other than accepted) the error recorded and status Error; and
// fencelock.guard.decisions and fencelock.guard.duration counting each
// decision with the kind (and the resource, where given) as attributes,
// and nothing else.
func (r *Recorder) Expect(t *testing.T, kind string, want ...Observed) {
	t.Helper()
	spans := r.Spans(kind)
	if len(spans) != len(want) {
		t.Fatalf("%d %s spans of kind %s, want %d", len(spans), fencing.SpanName, kind, len(want))
	}
	for i, s := range spans {
		w := want[i]
		attrs := attribute.NewSet(s.Attributes()...)
		check := func(k attribute.Key, v attribute.Value, ok bool) {
			t.Helper()
			got, has := attrs.Value(k)
			if has != ok || ok && got != v {
				t.Errorf("span %d (%+v): attribute %s = %v (present %v), want %v (present %v)", i, w, k, got.String(), has, v.String(), ok)
			}
		}
		check(fencing.TokenKey, attribute.Int64Value(int64(w.Token)), true)
		check(fencing.DecisionKey, attribute.StringValue(string(w.Decision)), true)
		check(fencing.ResourceKey, attribute.StringValue(w.Resource), w.Resource != "")
		failed := w.Decision != fencing.DecisionAccepted
		if got := s.Status().Code == codes.Error; got != failed {
			t.Errorf("span %d (%+v): status %v, want Error: %v", i, w, s.Status(), failed)
		}
		recorded := slices.ContainsFunc(s.Events(), func(e sdktrace.Event) bool { return e.Name == "exception" })
		if recorded != failed {
			t.Errorf("span %d (%+v): error recorded: %v, want %v", i, w, recorded, failed)
		}
	}

	wantCounts := map[attribute.Distinct]int64{}
	sets := map[attribute.Distinct]attribute.Set{}
	for _, w := range want {
		kv := []attribute.KeyValue{fencing.KindKey.String(kind), fencing.DecisionKey.String(string(w.Decision))}
		if w.Resource != "" {
			kv = append(kv, fencing.ResourceKey.String(w.Resource))
		}
		set := attribute.NewSet(kv...)
		wantCounts[set.Equivalent()]++
		sets[set.Equivalent()] = set
	}
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[attribute.Distinct]int64{}
	durations := map[attribute.Distinct]uint64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != fencing.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			switch m.Name {
			case fencing.DecisionsMetric:
				if m.Unit != "{decision}" {
					t.Errorf("%s unit %q", m.Name, m.Unit)
				}
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok || !sum.IsMonotonic {
					t.Fatalf("%s is a %T, want a monotonic Sum[int64]", m.Name, m.Data)
				}
				for _, p := range sum.DataPoints {
					if v, _ := p.Attributes.Value(fencing.KindKey); v.AsString() == kind {
						counts[p.Attributes.Equivalent()] += p.Value
						sets[p.Attributes.Equivalent()] = p.Attributes
					}
				}
			case fencing.DurationMetric:
				if m.Unit != "s" {
					t.Errorf("%s unit %q", m.Name, m.Unit)
				}
				h, ok := m.Data.(metricdata.Histogram[float64])
				if !ok {
					t.Fatalf("%s is a %T, want a Histogram[float64]", m.Name, m.Data)
				}
				for _, p := range h.DataPoints {
					if v, _ := p.Attributes.Value(fencing.KindKey); v.AsString() == kind {
						durations[p.Attributes.Equivalent()] += p.Count
						sets[p.Attributes.Equivalent()] = p.Attributes
						if p.Sum <= 0 {
							t.Errorf("%s %v: sum %v, want > 0", m.Name, p.Attributes.ToSlice(), p.Sum)
						}
					}
				}
			}
		}
	}
	for d, set := range sets {
		if counts[d] != wantCounts[d] {
			t.Errorf("%s %v = %d, want %d", fencing.DecisionsMetric, set.ToSlice(), counts[d], wantCounts[d])
		}
		if int64(durations[d]) != wantCounts[d] {
			t.Errorf("%s %v: %d recorded, want %d", fencing.DurationMetric, set.ToSlice(), durations[d], wantCounts[d])
		}
	}
}

// telemetry checks that every decision is reported (Recorder.Expect): an
// admitted token, a stale one, a failed write, an invalid token, the
// Gate's, an unreachable store's (error, or unknown); that the write function runs in the Do's
// span, and that resource names are attributes only when asked for.
func telemetry[S any](t *testing.T, h Harness[S]) {
	if h.Kind == "" {
		t.Fatal("the harness names no guard Kind")
	}
	ctx, rec := ctxT(t), NewRecorder(t)
	s := h.Open(t, rec.Telemetry(false))
	var inWrite trace.SpanContext
	if err := s.Do(ctx, "doc", 5, func(ctx context.Context, st S) error {
		inWrite = trace.SpanContextFromContext(ctx)
		return s.Put("doc", "by 5")(ctx, st)
	}); err != nil {
		t.Fatal(err)
	}
	mustStale(t, put(ctx, s, "doc", 4, "by 4"), "doc", 4, 5)
	boom := errors.New("boom")
	if err := s.Do(ctx, "doc", 6, func(context.Context, S) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed write: %v", err)
	}
	if err := put(ctx, s, "doc", 0, "no token"); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Fatalf("token 0: %v", err)
	}
	if err := s.Admit(ctx, "doc", 5); err != nil {
		t.Fatal(err)
	}
	want := []Observed{{fencing.DecisionAccepted, 5, ""}, {fencing.DecisionStale, 4, ""}, {fencing.DecisionError, 6, ""}, {fencing.DecisionError, 0, ""}, {fencing.DecisionAccepted, 5, ""}}
	if gs, ok := any(s).(Gater); ok {
		g := gs.Gate()
		mustStale(t, g.Do(ctx, "doc", 3, func(context.Context) error { return nil }), "doc", 3, 5)
		if err := g.Do(ctx, "doc", 5, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		want = append(want, Observed{fencing.DecisionStale, 3, ""}, Observed{fencing.DecisionAccepted, 5, ""})
	}
	rec.Expect(t, h.Kind, want...)
	if first := rec.Spans(h.Kind)[0].SpanContext(); !inWrite.Equal(first) {
		t.Errorf("the write function's context carries span %v, want the Do's span %v", inWrite, first)
	}

	if h.Unreachable != nil {
		t.Run("Unreachable", func(t *testing.T) {
			rec := NewRecorder(t)
			g := h.Unreachable(t, rec.Telemetry(false))
			ctx, cancel := context.WithTimeout(ctxT(t), 3*time.Second)
			defer cancel()
			err := g.Do(ctx, "doc", 1, nil)
			if err == nil || errors.Is(err, fencing.ErrStaleToken) {
				t.Fatalf("Do on an unreachable store: err = %v, want a failure", err)
			}
			t.Logf("Do on an unreachable store: %v", err)
			// Unknown where the guard cannot tell a request that never
			// left from one whose answer was lost (a client that retries
			// after a timeout, then fails to connect).
			d := fencing.DecisionOf(err)
			if d != fencing.DecisionError && d != fencing.DecisionUnknown {
				t.Fatalf("Do on an unreachable store is %s, want error or unknown", d)
			}
			rec.Expect(t, h.Kind, Observed{d, 1, ""})
		})
	}

	t.Run("ResourceNames", func(t *testing.T) {
		ctx, rec := ctxT(t), NewRecorder(t)
		s := h.Open(t, rec.Telemetry(true))
		if err := put(ctx, s, "doc", 7, "by 7"); err != nil {
			t.Fatal(err)
		}
		mustStale(t, put(ctx, s, "doc", 6, "by 6"), "doc", 6, 7)
		rec.Expect(t, h.Kind, Observed{fencing.DecisionAccepted, 7, "doc"}, Observed{fencing.DecisionStale, 6, "doc"})
	})
}
