package fencing

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every guard's meter and tracer.
const ScopeName = "github.com/fencelock/fencelock/fencing"

// Names of the guards' instruments, span and attributes (OpenTelemetry
// semantic-convention style).
const (
	// DecisionsMetric counts Do calls by decision and guard kind ({decision}).
	DecisionsMetric = "fencelock.guard.decisions"
	// DurationMetric is the time a Do took, check, write and commit
	// included, in seconds, by decision and guard kind.
	DurationMetric = "fencelock.guard.duration"
	// SpanName is the span around one Do.
	SpanName = "fencelock.guard.do"

	// DecisionKey is the attribute holding the Decision.
	DecisionKey = attribute.Key("fencelock.guard.decision")
	// KindKey is the attribute naming the guard: memory, sql, sql_lease,
	// redis, etcd, file or http.
	KindKey = attribute.Key("fencelock.guard.kind")
	// ResourceKey is the attribute holding the guarded resource's name (the
	// lock's name for sqlfence.LeaseGuard), recorded only with
	// Telemetry.ResourceNames.
	ResourceKey = attribute.Key("fencelock.guard.resource")
	// TokenKey is the span attribute holding the token as an int64 (0: the
	// request carried none).
	TokenKey = attribute.Key("fencelock.token")
)

// Decision is what a guard decided about one Do.
type Decision string

// The decisions.
const (
	// DecisionAccepted: the token was admitted and the write committed.
	DecisionAccepted Decision = "accepted"
	// DecisionStale: the guard rejected the token because a newer one had
	// been admitted, or (sqlfence.LeaseGuard) the token's lease was no
	// longer live: the error matches ErrStaleToken.
	DecisionStale Decision = "stale"
	// DecisionUnknown: the write may or may not have landed (its answer
	// was lost): the error matches ErrOutcomeUnknown.
	DecisionUnknown Decision = "unknown"
	// DecisionError: anything else failed, and the write did not land: the
	// write function, the store (not reachable, a refused commit), the
	// context, an invalid or missing token.
	DecisionError Decision = "error"
)

// DecisionOf is the Decision of a Do that returned err: DecisionAccepted
// for nil, DecisionStale if errors.Is(err, ErrStaleToken) (this includes
// sqlfence.ErrLeaseEnded), DecisionUnknown if errors.Is(err,
// ErrOutcomeUnknown), DecisionError otherwise.
func DecisionOf(err error) Decision {
	switch {
	case err == nil:
		return DecisionAccepted
	case errors.Is(err, ErrStaleToken):
		return DecisionStale
	case errors.Is(err, ErrOutcomeUnknown):
		return DecisionUnknown
	}
	return DecisionError
}

// Telemetry says where a guard reports its decisions. Every guard takes it
// through its package's WithTelemetry option (fencing.WithTelemetry for
// Memory). The zero Telemetry is off: nothing is recorded and Do allocates
// nothing more than without it.
//
// Each Do then adds one to the fencelock.guard.decisions counter and
// records its fencelock.guard.duration, both with the attributes
// fencelock.guard.decision (accepted, stale, unknown or error: see
// DecisionOf) and
// fencelock.guard.kind, and runs in a span "fencelock.guard.do" with
// fencelock.guard.kind, fencelock.token and fencelock.guard.decision (all
// set when it ends); a failed Do's error (a stale rejection too) is
// recorded on the span, whose status is then Error. The write function's
// context carries that span, so what it does is traced as its children.
type Telemetry struct {
	// MeterProvider receives the metrics (nil: none). Pass
	// otel.GetMeterProvider() for the global one.
	MeterProvider metric.MeterProvider
	// TracerProvider receives the spans (nil: none). Pass
	// otel.GetTracerProvider() for the global one.
	TracerProvider trace.TracerProvider
	// ResourceNames adds the resource's name as the fencelock.guard.resource
	// attribute to the metrics and the span (default false: a metric series
	// per resource can be too many).
	ResourceNames bool
}

// durationBounds are the fencelock.guard.duration buckets, in seconds:
// from an in-memory check (well under 100µs) to a write that waited for a
// busy store.
var durationBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Instruments is a Telemetry made ready for one guard: a guard makes it
// once (Telemetry.Instruments) and observes each Do with Start. A nil
// *Instruments records nothing, at no cost.
type Instruments struct {
	tracer    trace.Tracer        // nil: no spans
	decisions metric.Int64Counter // nil: no metrics
	duration  metric.Float64Histogram
	kind      attribute.KeyValue
	resources bool
	// per decision (accepted, stale, unknown, error): the metrics'
	// attributes, kind and decision, and the options that carry them
	sets    [4]attribute.Set
	adds    [4][]metric.AddOption
	records [4][]metric.RecordOption
	// the span's decision attribute by decision, made once
	decisionAttrs [4]attribute.KeyValue
}

// Instruments returns the instruments of a guard of the given kind (the
// fencelock.guard.kind attribute), or nil if t has neither provider. Without
// a MeterProvider no metric is recorded, without a TracerProvider no span
// is started: the same as otel's no-op providers, without their cost. An
// instrument the meter provider fails to create records nothing.
func (t Telemetry) Instruments(kind string) *Instruments {
	if t.MeterProvider == nil && t.TracerProvider == nil {
		return nil
	}
	in := &Instruments{kind: KindKey.String(kind), resources: t.ResourceNames}
	if t.TracerProvider != nil {
		in.tracer = t.TracerProvider.Tracer(ScopeName)
		for i, d := range decisions {
			in.decisionAttrs[i] = DecisionKey.String(string(d))
		}
	}
	if t.MeterProvider == nil {
		return in
	}
	meter := t.MeterProvider.Meter(ScopeName)
	var err error
	in.decisions, err = meter.Int64Counter(DecisionsMetric,
		metric.WithUnit("{decision}"),
		metric.WithDescription("Fencing guard decisions: a token accepted (the write committed), rejected as stale, a write of unknown outcome (its answer lost), or an error."))
	if err != nil {
		in.decisions = noop.Int64Counter{}
	}
	in.duration, err = meter.Float64Histogram(DurationMetric,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of a fencing guard's Do: the check, the write and the commit."),
		metric.WithExplicitBucketBoundaries(durationBounds...))
	if err != nil {
		in.duration = noop.Float64Histogram{}
	}
	for i, d := range decisions {
		in.sets[i] = attribute.NewSet(in.kind, DecisionKey.String(string(d)))
		opt := metric.WithAttributeSet(in.sets[i])
		in.adds[i] = []metric.AddOption{opt}
		in.records[i] = []metric.RecordOption{opt}
	}
	return in
}

// decisions are the Decisions by their index in Instruments' arrays.
var decisions = [4]Decision{DecisionAccepted, DecisionStale, DecisionUnknown, DecisionError}

// Observation is one Do being observed, from Instruments.Start to End.
type Observation struct {
	in       *Instruments
	ctx      context.Context // carries the span, for exemplars
	span     trace.Span      // nil: none
	record   bool            // span is recording: the sampler kept it
	start    time.Time
	resource string
	token    Token
}

// Start begins observing a Do of token on resource: it starts the span and
// the clock and returns the context carrying the span, for the store calls
// and the write function. On a nil *Instruments it returns ctx and an
// Observation whose End does nothing.
//
// The span gets its attributes (kind, token, decision, resource if
// allowed) when it ends, in one call, none through Start: the SDK copies
// Start's attributes into its config and again into the span, and grows
// the span's for each later call (see the backend package's telemetry),
// and a span the sampler dropped costs nothing more than the SDK's Start
// and End. A head sampler sees the span's name only.
func (in *Instruments) Start(ctx context.Context, resource string, token Token) (context.Context, Observation) {
	if in == nil {
		return ctx, Observation{}
	}
	o := Observation{in: in, resource: resource, token: token}
	if in.tracer != nil {
		ctx, o.span = in.tracer.Start(ctx, SpanName)
		o.record = o.span.IsRecording()
	}
	o.ctx, o.start = ctx, time.Now()
	return ctx, o
}

// End records the decision of err (see DecisionOf) and the duration, and
// ends the span, with err recorded on it if not nil.
func (o Observation) End(err error) {
	if o.in == nil {
		return
	}
	i := 3
	switch DecisionOf(err) {
	case DecisionAccepted:
		i = 0
	case DecisionStale:
		i = 1
	case DecisionUnknown:
		i = 2
	}
	if o.in.decisions != nil {
		elapsed := time.Since(o.start).Seconds()
		adds, records := o.in.adds[i], o.in.records[i]
		if o.in.resources {
			opt := metric.WithAttributeSet(attribute.NewSet(append(o.in.sets[i].ToSlice(), ResourceKey.String(o.resource))...))
			adds, records = []metric.AddOption{opt}, []metric.RecordOption{opt}
		}
		o.in.decisions.Add(o.ctx, 1, adds...)
		o.in.duration.Record(o.ctx, elapsed, records...)
	}
	if o.span == nil {
		return
	}
	if o.record {
		tok := TokenKey.Int64(int64(o.token))
		if o.in.resources {
			o.span.SetAttributes(o.in.kind, tok, o.in.decisionAttrs[i], ResourceKey.String(o.resource))
		} else {
			o.span.SetAttributes(o.in.kind, tok, o.in.decisionAttrs[i])
		}
		if err != nil {
			o.span.RecordError(err)
			o.span.SetStatus(codes.Error, err.Error())
		}
	}
	o.span.End()
}
