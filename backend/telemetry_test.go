package backend_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
)

// observed is a mem Locker whose telemetry goes to a real SDK: a manual
// metric reader, a span recorder and a recording log handler.
type observed struct {
	l     *backend.Locker
	srv   *mem.Server
	conn  *mem.Conn
	r     *sdkmetric.ManualReader
	spans *tracetest.SpanRecorder
	tp    *sdktrace.TracerProvider
	logs  *recordingHandler
}

func newObserved(t *testing.T, opts ...backend.Option) *observed {
	t.Helper()
	o := &observed{srv: mem.NewServer(), r: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder(), logs: &recordingHandler{}}
	o.conn = o.srv.Connect()
	o.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.spans))
	all := append([]backend.Option{backend.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.r))),
		backend.WithTracerProvider(o.tp), backend.WithLogger(slog.New(o.logs))}, opts...)
	l, err := mem.New(o.conn, all...)
	require.NoError(t, err)
	o.l = l
	t.Cleanup(func() { _ = l.Close() })
	return o
}

// collect returns the metrics recorded so far, by name.
func (o *observed) collect(t testing.TB) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, o.r.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, backend.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// has reports whether set holds every one of kvs.
func has(set attribute.Set, kvs []attribute.KeyValue) bool {
	for _, kv := range kvs {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum is the total of the counter or up-down counter name over the points
// with every one of kvs.
func (o *observed) sum(t testing.TB, name string, kvs ...attribute.KeyValue) int64 {
	t.Helper()
	data, ok := o.collect(t)[name]
	if !ok {
		return 0
	}
	s, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T", name, data)
	var n int64
	for _, p := range s.DataPoints {
		if has(p.Attributes, kvs) {
			n += p.Value
		}
	}
	return n
}

// count is the number of values recorded in the histogram name over the
// points with every one of kvs.
func (o *observed) count(t testing.TB, name string, kvs ...attribute.KeyValue) uint64 {
	t.Helper()
	data, ok := o.collect(t)[name]
	if !ok {
		return 0
	}
	h, ok := data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T", name, data)
	var n uint64
	for _, p := range h.DataPoints {
		if has(p.Attributes, kvs) {
			n += p.Count
		}
	}
	return n
}

// attrSets returns every attribute set recorded, of every metric.
func (o *observed) attrSets(t testing.TB) []attribute.Set {
	var sets []attribute.Set
	for _, data := range o.collect(t) {
		switch d := data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		}
	}
	return sets
}

func (o *observed) span(t testing.TB, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range o.spans.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "spans called %s", name)
	return found[0]
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// recordingHandler is a slog.Handler that keeps every record.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// find returns the records with message msg, each as its attributes.
func (h *recordingHandler) find(msg string) []map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]slog.Value
	for _, r := range h.records {
		if r.Message != msg {
			continue
		}
		m := map[string]slog.Value{"level": slog.StringValue(r.Level.String())}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value
			return true
		})
		out = append(out, m)
	}
	return out
}

var (
	memBackend  = attribute.String("fencelock.backend", "mem")
	waitTrue    = attribute.Bool("fencelock.acquire.wait", true)
	waitFalse   = attribute.Bool("fencelock.acquire.wait", false)
	granted     = attribute.String("fencelock.acquire.result", "granted")
	notAcquired = attribute.String("fencelock.acquire.result", "not_acquired")
	cancelled   = attribute.String("fencelock.acquire.result", "cancelled")
)

func cause(c string) attribute.KeyValue { return attribute.String("fencelock.loss.cause", c) }

// A granted Acquire and its Release: the acquire duration, held leases and
// waiters, the hold duration, and both spans as children of the caller's.
func TestTelemetryAcquireRelease(t *testing.T) {
	o := newObserved(t)
	ctx, parent := o.tp.Tracer("test").Start(context.Background(), "caller")
	ls, err := o.l.Acquire(ctx, "t")
	require.NoError(t, err)
	assert.EqualValues(t, 1, o.count(t, "fencelock.acquire.duration", memBackend, waitTrue, granted))
	assert.EqualValues(t, 1, o.sum(t, "fencelock.leases.held", memBackend))
	assert.EqualValues(t, 0, o.sum(t, "fencelock.waiters", memBackend))
	assert.EqualValues(t, 0, o.count(t, "fencelock.hold.duration"))

	require.NoError(t, ls.Release(ctx))
	parent.End()
	assert.EqualValues(t, 0, o.sum(t, "fencelock.leases.held", memBackend))
	assert.EqualValues(t, 1, o.count(t, "fencelock.hold.duration", memBackend))
	assert.EqualValues(t, 0, o.sum(t, "fencelock.losses"), "a release is no loss")

	acq := o.span(t, "fencelock.acquire")
	assert.Equal(t, parent.SpanContext().SpanID(), acq.Parent().SpanID(), "parent from the caller's context")
	var events []string
	for _, e := range acq.Events() {
		events = append(events, e.Name)
	}
	assert.Equal(t, []string{"queued", "granted"}, events)
	tok, ok := spanAttr(acq, "fencelock.token")
	require.True(t, ok, "token attribute")
	assert.Equal(t, int64(ls.Token()), tok.AsInt64())
	res, _ := spanAttr(acq, "fencelock.acquire.result")
	assert.Equal(t, "granted", res.AsString())
	assert.Equal(t, codes.Unset, acq.Status().Code)
	be, _ := spanAttr(acq, "fencelock.backend")
	assert.Equal(t, "mem", be.AsString())
	wait, ok := spanAttr(acq, "fencelock.acquire.wait")
	assert.True(t, ok && wait.AsBool(), "fencelock.acquire.wait true")
	rel := o.span(t, "fencelock.release")
	assert.Equal(t, parent.SpanContext().SpanID(), rel.Parent().SpanID())
	assert.Equal(t, codes.Unset, rel.Status().Code)
	tok, ok = spanAttr(rel, "fencelock.token")
	require.True(t, ok, "token attribute on the release span")
	assert.Equal(t, int64(ls.Token()), tok.AsInt64())
	be, _ = spanAttr(rel, "fencelock.backend")
	assert.Equal(t, "mem", be.AsString())
}

// A TryAcquire of a held lock is not_acquired, wait false; the span
// carries the error as an event but no Error status (the lock was held:
// nothing failed).
func TestTelemetryNotAcquired(t *testing.T) {
	o := newObserved(t)
	other, err := mem.New(o.srv.Connect())
	require.NoError(t, err)
	defer other.Close()
	ctx := context.Background()
	held, err := other.Acquire(ctx, "t")
	require.NoError(t, err)
	defer held.Release(ctx)

	_, err = o.l.TryAcquire(ctx, "t")
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	assert.EqualValues(t, 1, o.count(t, "fencelock.acquire.duration", memBackend, waitFalse, notAcquired))
	assert.EqualValues(t, 0, o.sum(t, "fencelock.leases.held"))
	s := o.span(t, "fencelock.acquire")
	res, _ := spanAttr(s, "fencelock.acquire.result")
	assert.Equal(t, "not_acquired", res.AsString())
	be, _ := spanAttr(s, "fencelock.backend")
	assert.Equal(t, "mem", be.AsString())
	wait, ok := spanAttr(s, "fencelock.acquire.wait")
	assert.True(t, ok && !wait.AsBool(), "fencelock.acquire.wait false")
	_, ok = spanAttr(s, "fencelock.token")
	assert.False(t, ok, "no token without a grant")
	assert.Equal(t, codes.Unset, s.Status().Code)
	require.NotEmpty(t, s.Events())
	assert.Equal(t, "exception", s.Events()[len(s.Events())-1].Name)
}

// A cancelled wait: counted as a waiter while queued, then cancelled, and
// no waiter is left.
func TestTelemetryCancelledWait(t *testing.T) {
	o := newObserved(t)
	other, err := mem.New(o.srv.Connect())
	require.NoError(t, err)
	defer other.Close()
	held, err := other.Acquire(context.Background(), "t")
	require.NoError(t, err)
	defer held.Release(context.Background())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := o.l.Acquire(ctx, "t")
		done <- err
	}()
	require.Eventually(t, func() bool { return o.sum(t, "fencelock.waiters", memBackend) == 1 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	err = <-done
	require.ErrorIs(t, err, backend.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	assert.EqualValues(t, 0, o.sum(t, "fencelock.waiters"))
	assert.EqualValues(t, 1, o.count(t, "fencelock.acquire.duration", memBackend, waitTrue, cancelled))
	assert.EqualValues(t, 0, o.sum(t, "fencelock.leases.held"))
}

// Losses by cause, one each, with the held count back to 0, the loss
// logged at Warn with the name, token and cause, and the lease's error
// matching the cause's sentinel (and ErrLeaseLost).
func TestTelemetryLosses(t *testing.T) {
	ctx := context.Background()
	sentinels := map[string]error{"revoked": backend.ErrRevoked, "expired": backend.ErrExpired,
		"deadline": backend.ErrDeadline, "max_hold": backend.ErrMaxHold, "closed": backend.ErrReleased}
	lose := map[string]func(t *testing.T, o *observed) *backend.Lease{
		"revoked": func(t *testing.T, o *observed) *backend.Lease {
			ls, err := o.l.Acquire(ctx, "t")
			require.NoError(t, err)
			require.True(t, o.srv.Revoke("t", ls.Token()))
			return ls
		},
		"expired": func(t *testing.T, o *observed) *backend.Lease {
			// Never renewed. The local deadline half a TTL before the
			// server's expiry: with the default drift (5ms at this TTL)
			// a loaded machine could let the server's expiry be seen
			// first (expired too, but found by the backend).
			ls, err := o.l.Acquire(ctx, "t", backend.WithTTL(400*time.Millisecond), backend.WithAutoRenew(false),
				backend.WithDriftMargin(200*time.Millisecond))
			require.NoError(t, err)
			return ls
		},
		"deadline": func(t *testing.T, o *observed) *backend.Lease {
			ls, err := o.l.Acquire(ctx, "t", backend.WithTTL(400*time.Millisecond))
			require.NoError(t, err)
			o.conn.Cut() // renewals get no answer from now on
			return ls
		},
		"max_hold": func(t *testing.T, o *observed) *backend.Lease {
			ls, err := o.l.Acquire(ctx, "t", backend.WithTTL(300*time.Millisecond), backend.WithMaxHold(300*time.Millisecond))
			require.NoError(t, err)
			return ls
		},
		"closed": func(t *testing.T, o *observed) *backend.Lease {
			ls, err := o.l.Acquire(ctx, "t")
			require.NoError(t, err)
			require.NoError(t, o.l.Close())
			return ls
		},
	}
	for c, f := range lose {
		t.Run(c, func(t *testing.T) {
			o := newObserved(t)
			ls := f(t, o)
			select {
			case <-ls.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the lease did not end")
			}
			require.Eventually(t, func() bool { return o.sum(t, "fencelock.losses") == 1 }, 5*time.Second, 5*time.Millisecond)
			assert.EqualValues(t, 1, o.sum(t, "fencelock.losses", memBackend, cause(c)))
			assert.EqualValues(t, 0, o.sum(t, "fencelock.leases.held"))
			assert.EqualValues(t, 1, o.count(t, "fencelock.hold.duration", memBackend))
			_ = ls.Release(ctx)
			assert.EqualValues(t, 1, o.sum(t, "fencelock.losses"), "the Release of a lost lease is no second loss")
			assert.EqualValues(t, 0, o.sum(t, "fencelock.leases.held"))
			assert.EqualValues(t, 0, o.sum(t, "fencelock.waiters"))

			msg, level := "fencelock: lease lost", "WARN"
			if c == "closed" {
				msg, level = "fencelock: lease released by Close", "INFO"
			}
			lines := o.logs.find(msg)
			require.Len(t, lines, 1, "log lines %q", msg)
			assert.Equal(t, level, lines[0]["level"].String())
			assert.Equal(t, "t", lines[0]["fencelock.lock.name"].String())
			assert.Equal(t, int64(ls.Token()), lines[0]["fencelock.token"].Int64())
			assert.Equal(t, c, lines[0]["fencelock.loss.cause"].String())
			assert.Equal(t, "mem", lines[0]["fencelock.backend"].String())
			require.ErrorIs(t, ls.Err(), sentinels[c])
			if c != "closed" {
				require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost)
			}
			for other, err := range sentinels {
				if other != c && other != "closed" {
					assert.NotErrorIs(t, ls.Err(), err, "a loss by %s matches the cause %s too", c, other)
				}
			}
		})
	}
}

// Background renewals are counted with their headroom; a failed one is
// counted and logged at Info before the loss.
func TestTelemetryRenewals(t *testing.T) {
	ctx := context.Background()
	ok := attribute.String("fencelock.renewal.result", "ok")
	var (
		o  *observed
		ls *backend.Lease
	)
	// A lease of 900ms renews every 300ms, and once cut off retries every
	// 90ms for at least 600ms before its deadline, with a retry logged for
	// each failure before the loss (none after). A machine busy enough to
	// stall the process for longer loses it before its second renewal:
	// then the test tries again with a fresh Locker, whose counts start at
	// 0.
	for attempt := 1; ; attempt++ {
		o = newObserved(t)
		var err error
		ls, err = o.l.Acquire(ctx, "t", backend.WithTTL(900*time.Millisecond))
		require.NoError(t, err)
		for deadline := time.Now().Add(10 * time.Second); ls.Err() == nil && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if o.sum(t, "fencelock.renewals", memBackend, ok) >= 2 {
				break
			}
		}
		if ls.Err() == nil && o.sum(t, "fencelock.renewals", memBackend, ok) >= 2 {
			break
		}
		require.Less(t, attempt, 5, "no two renewals before the lease ended: %v", ls.Err())
	}
	assert.GreaterOrEqual(t, o.count(t, "fencelock.renewal.headroom", memBackend), uint64(2))

	o.conn.Cut() // renewals fail from now on, until the deadline
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease was not lost")
	}
	// Done fires first; the loss is logged, then counted, just after.
	require.Eventually(t, func() bool {
		return o.sum(t, "fencelock.losses", memBackend) > 0
	}, 5*time.Second, 5*time.Millisecond)
	assert.GreaterOrEqual(t, o.sum(t, "fencelock.renewals", memBackend, attribute.String("fencelock.renewal.result", "failed")), int64(1))
	assert.EqualValues(t, 1, o.sum(t, "fencelock.losses", memBackend, cause("deadline")))
	retried := o.logs.find("fencelock: renewal failed, retrying")
	require.NotEmpty(t, retried)
	assert.Equal(t, "INFO", retried[0]["level"].String())
	assert.Equal(t, "t", retried[0]["fencelock.lock.name"].String())
	assert.Equal(t, int64(ls.Token()), retried[0]["fencelock.token"].Int64())
	require.Len(t, o.logs.find("fencelock: lease lost"), 1)
}

// Lock names are attributes only when allowed.
func TestTelemetryLockNameAttribute(t *testing.T) {
	ctx := context.Background()
	for _, allowed := range []bool{false, true} {
		o := newObserved(t, backend.WithLockNameAttribute(allowed))
		ls, err := o.l.Acquire(ctx, "secret-name")
		require.NoError(t, err)
		require.NoError(t, ls.Release(ctx))
		sets := o.attrSets(t)
		require.NotEmpty(t, sets)
		for _, set := range sets {
			v, ok := set.Value("fencelock.lock.name")
			assert.Equal(t, allowed, ok, "lock name in %v", set.Encoded(attribute.DefaultEncoder()))
			if ok {
				assert.Equal(t, "secret-name", v.AsString())
			}
		}
		_, ok := spanAttr(o.span(t, "fencelock.acquire"), "fencelock.lock.name")
		assert.Equal(t, allowed, ok, "lock name on the span")
		if allowed {
			assert.EqualValues(t, 1, o.count(t, "fencelock.acquire.duration", memBackend, waitTrue, granted,
				attribute.String("fencelock.lock.name", "secret-name")))
		}
	}
}

// The telemetry options configure the Locker: an acquisition given one is
// refused, before anything is sent.
func TestTelemetryOptionsAreLockerOnly(t *testing.T) {
	l, err := mem.New(mem.NewServer().Connect())
	require.NoError(t, err)
	defer l.Close()
	for _, opt := range []backend.Option{backend.WithMeterProvider(nil), backend.WithTracerProvider(nil),
		backend.WithLogger(nil), backend.WithLockNameAttribute(true)} {
		_, err := l.Acquire(context.Background(), "t", opt)
		require.ErrorIs(t, err, backend.ErrInvalidOption)
		assert.Contains(t, err.Error(), "configures the Locker")
	}
	// Given to New (or Open) they are fine, and nil turns each off.
	l2, err := backend.Open(context.Background(), "mem://opts", backend.WithMeterProvider(nil), backend.WithLogger(nil))
	require.NoError(t, err)
	ls, err := l2.Acquire(context.Background(), "t")
	require.NoError(t, err)
	require.NoError(t, ls.Release(context.Background()))
	require.NoError(t, l2.Close())
}

// Without a logger nothing is logged and nothing fails: a lost lease and a
// closed Locker with telemetry off.
func TestTelemetryOffLoses(t *testing.T) {
	srv := mem.NewServer()
	l, err := mem.New(srv.Connect())
	require.NoError(t, err)
	ls, err := l.Acquire(context.Background(), "t")
	require.NoError(t, err)
	require.True(t, srv.Revoke("t", ls.Token()))
	<-ls.Done()
	require.True(t, errors.Is(ls.Err(), backend.ErrLeaseLost))
	_ = l.Close() // reports the lost lease if its clean-up is still on its way
	// Done fires first; the hold is recorded just after.
	require.Eventually(t, func() bool { h, ok := l.HoldTimes("t"); return ok && h.Count == 1 }, 5*time.Second, 5*time.Millisecond)
}

// Overhead of the telemetry on an uncontended Acquire+Release on mem: off
// (the default), and on with a real SDK (a manual reader; the default
// sampler and a BatchSpanProcessor, in front of an exporter that discards).
func BenchmarkTelemetry(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	run := func(b *testing.B, opts ...backend.Option) {
		l, err := mem.New(mem.NewServer().Connect(), opts...)
		require.NoError(b, err)
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
	}
	b.Run("off", func(b *testing.B) { run(b) })
	b.Run("metrics", func(b *testing.B) {
		run(b, backend.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	})
	b.Run("metrics+traces", func(b *testing.B) {
		run(b, backend.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))),
			backend.WithTracerProvider(tp)) // the default sampler and a BatchSpanProcessor, as in production
	})
}
