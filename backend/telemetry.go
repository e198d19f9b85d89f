package backend

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fencelock/fencelock/fencing"
)

// ScopeName is the OpenTelemetry instrumentation scope of the Locker's
// meters and tracers.
const ScopeName = "github.com/fencelock/fencelock"

// observeOptions are the Locker-only options, which New reads.
type observeOptions struct {
	meters    metric.MeterProvider
	tracers   trace.TracerProvider
	logger    *slog.Logger
	lockNames bool
	first     string // the first one given, for the error of an acquisition given one
}

// observe returns a copy of s's Locker-only options for the option called
// name to set (a copy: a Locker's defaults are never changed by another's).
func (s *settings) observe(name string) *observeOptions {
	o := &observeOptions{first: name}
	if s.obs != nil {
		*o = *s.obs
	}
	s.obs = o
	return o
}

// WithMeterProvider makes the Locker record its metrics (acquire and hold
// durations, renewals, losses, held leases and waiters: see the package
// documentation) through mp, under the scope ScopeName. Default: none, no
// metric is recorded and nothing is allocated for them; pass
// otel.GetMeterProvider() for the global provider, nil to turn them off.
// It configures the Locker: given to Acquire or TryAcquire it is rejected
// with ErrInvalidOption.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *settings) { s.observe("WithMeterProvider").meters = mp }
}

// WithTracerProvider makes the Locker trace its acquisitions
// ("fencelock.acquire") and releases ("fencelock.release") through tp, as
// children of the span in the caller's context. Default: none, no span is
// started; pass otel.GetTracerProvider() for the global provider, nil to
// turn tracing off. It configures the Locker: given to Acquire or
// TryAcquire it is rejected with ErrInvalidOption.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *settings) { s.observe("WithTracerProvider").tracers = tp }
}

// WithLogger makes the Locker log to logger: a lost lease (Warn, with its
// cause; Info when Close ended it), a failed renewal that will be retried
// (Info; none once the lease was lost), and, on
// backends that report it (ZooKeeper), a held lease's connection suspended
// and resumed (Info), each with the lock name and token. Default nil: the
// Locker logs nothing. It configures the Locker: given to Acquire or
// TryAcquire it is rejected with ErrInvalidOption.
func WithLogger(logger *slog.Logger) Option {
	return func(s *settings) { s.observe("WithLogger").logger = logger }
}

// WithLockNameAttribute adds the lock name to the Locker's metrics and spans
// as the attribute fencelock.lock.name. Default false: lock names are left
// out, since every name would be a time series of its own (logs always
// carry the name). Turn it on only when the names are few and fixed. It
// configures the Locker: given to Acquire or TryAcquire it is rejected
// with ErrInvalidOption.
func WithLockNameAttribute(on bool) Option {
	return func(s *settings) { s.observe("WithLockNameAttribute").lockNames = on }
}

// Attribute keys and values of the Locker's metrics, spans and logs.
const (
	attrBackend       = "fencelock.backend"
	attrLockName      = "fencelock.lock.name"
	attrToken         = "fencelock.token"
	attrAcquireResult = "fencelock.acquire.result"
	attrAcquireWait   = "fencelock.acquire.wait"
	attrRenewalResult = "fencelock.renewal.result"
	attrLossCause     = "fencelock.loss.cause"
)

// acquireResult is the fencelock.acquire.result of an acquisition.
type acquireResult int

const (
	resultGranted acquireResult = iota
	resultNotAcquired
	resultCancelled
	resultError
)

var acquireResults = [...]string{"granted", "not_acquired", "cancelled", "error"}

// resultOf classifies what an acquisition returned: granted; not_acquired
// when the lock was held (TryAcquire); cancelled when the caller's context
// ended while the acquisition was queued or before it started; error for
// anything else (the backend unavailable, a lost lease, a closed Locker,
// bad input).
func resultOf(err error) acquireResult {
	switch {
	case err == nil:
		return resultGranted
	case !errors.Is(err, ErrNotAcquired):
		return resultError
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return resultCancelled
	}
	return resultNotAcquired
}

// renewalResult is the fencelock.renewal.result of a background renewal.
type renewalResult int

const (
	renewalOK renewalResult = iota
	renewalFailed
	renewalLost
)

var renewalResults = [...]string{"ok", "failed", "lost"}

// ending is how a lease ended, for its metrics and log line.
type ending int

const (
	endReleased     ending = iota // by Release, or a failed acquisition
	endClosed                     // released by Locker.Close
	endExpired                    // lost: ErrExpired
	endRevoked                    // lost: ErrRevoked
	endDeleted                    // lost: ErrDeleted
	endSessionLost                // lost: ErrSessionLost
	endDeadline                   // lost: ErrDeadline
	endMaxHold                    // lost: ErrMaxHold
	endClientClosed               // lost: ErrClientClosed
	endLostBackend                // lost, the driver gave no cause
)

// lossCauses are the fencelock.loss.cause of each ending but endReleased.
var lossCauses = [...]string{endClosed: "closed", endExpired: "expired", endRevoked: "revoked", endDeleted: "deleted",
	endSessionLost: "session_lost", endDeadline: "deadline", endMaxHold: "max_hold",
	endClientClosed: "client_closed", endLostBackend: "backend"}

// lossEnding is the ending of a lease lost with cause: the first of the
// causes it matches, in the order of their precedence (the max hold ended
// the renewals that would have prevented any other; a client closed under
// the Locker ends its sessions and fails its renewals; the deadline's
// error may carry the last renewal's).
func lossEnding(cause error) ending {
	for _, c := range [...]struct {
		err error
		how ending
	}{{ErrMaxHold, endMaxHold}, {ErrClientClosed, endClientClosed}, {ErrDeadline, endDeadline}, {ErrSessionLost, endSessionLost},
		{ErrRevoked, endRevoked}, {ErrDeleted, endDeleted}, {ErrExpired, endExpired}} {
		if errors.Is(cause, c.err) {
			return c.how
		}
	}
	return endLostBackend
}

// telemetry is a Locker's instruments, tracer and logger. Its zero parts are
// off: metrics and traces are false unless a provider other than otel's
// noop one was given, and log is nil without a logger, so that the lock
// path asks only a boolean when telemetry is off.
type telemetry struct {
	metrics, traces bool
	lockNames       bool
	log             *slog.Logger // nil: no logging
	backend         attribute.KeyValue
	tracer          trace.Tracer

	acquireDur metric.Float64Histogram
	holdDur    metric.Float64Histogram
	headroom   metric.Float64Histogram
	renewals   metric.Int64Counter
	losses     metric.Int64Counter
	held       metric.Int64UpDownCounter
	waiters    metric.Int64UpDownCounter

	// The attribute sets without a lock name, made once.
	common      attrs
	acquireSets [2][len(acquireResults)]attrs // by wait, result
	renewal     [len(renewalResults)]attrs
	loss        [len(lossCauses)]attrs

	// The spans' attributes that do not change, made once:
	// fencelock.acquire.wait by wait, fencelock.acquire.result "granted",
	// and those of an acquire span that ends without a grant kept
	// (fencelock.backend, wait and result; a slice each, passed with ...,
	// so that nothing is allocated for the variadic argument).
	//
	// A span gets its attributes in one SetAttributes call, once they are
	// known and the span is known to be recorded, and none through Start:
	// the SDK (1.47) copies Start's attributes into its config before it
	// copies them into the span, and grows the span's attributes again
	// for each later call. Against fencelock.backend and
	// fencelock.acquire.wait given to Start and the rest set later, this
	// saves 4 allocations and about 1µs per Acquire+Release with a
	// BatchSpanProcessor (the SDK calls alone in a loop: 5.0µs against
	// 6.1µs on 2 cores), and a span the sampler dropped costs only the
	// SDK's Start and End. A head sampler sees the span's name only.
	waitAttrs   [2]attribute.KeyValue
	grantedAttr attribute.KeyValue
	endAttrs    [2][len(acquireResults)][]attribute.KeyValue // by wait, result
}

// attrs is an attribute set, made once, as the options of both kinds of
// measurement: passing them allocates nothing.
type attrs struct {
	set attribute.Set
	add []metric.AddOption
	rec []metric.RecordOption
}

func newAttrs(kvs ...attribute.KeyValue) attrs {
	set := attribute.NewSet(kvs...)
	o := metric.WithAttributeSet(set)
	return attrs{set: set, add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// named returns a with the lock name added.
func named(a attrs, name string) metric.MeasurementOption {
	return metric.WithAttributes(append(a.set.ToSlice(), attribute.String(attrLockName, name))...)
}

// add returns the options of a counter's measurement of lock name with a:
// a's own, or with the name when lock names are attributes.
func (t *telemetry) add(a attrs, name string) []metric.AddOption {
	if !t.lockNames {
		return a.add
	}
	return []metric.AddOption{named(a, name)}
}

// rec is add for a histogram's measurement.
func (t *telemetry) rec(a attrs, name string) []metric.RecordOption {
	if !t.lockNames {
		return a.rec
	}
	return []metric.RecordOption{named(a, name)}
}

// secondsBuckets are the bucket bounds of the duration histograms, in
// seconds: from 1ms (an uncontended grant) to 10 minutes (a long hold).
var secondsBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// newTelemetry makes the telemetry of a Locker over the backend called
// backend (a driver that gives no name is "unknown").
func newTelemetry(backend string, o *observeOptions) *telemetry {
	t := &telemetry{backend: attribute.String(attrBackend, cmp.Or(backend, "unknown"))}
	if o == nil {
		o = &observeOptions{}
	}
	t.lockNames = o.lockNames
	if o.logger != nil && o.logger.Handler() != nil {
		t.log = o.logger
	}
	if _, noop := o.tracers.(tracenoop.TracerProvider); o.tracers != nil && !noop {
		t.traces = true
		t.tracer = o.tracers.Tracer(ScopeName)
	}
	mp := o.meters
	if _, noop := mp.(metricnoop.MeterProvider); mp != nil && !noop {
		t.metrics = true
	} else {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(ScopeName)
	// The API returns a working (noop) instrument with its error: an SDK
	// that rejects one records nothing for it, and the lock works on.
	t.acquireDur, _ = m.Float64Histogram("fencelock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of Acquire or TryAcquire to its return, by result."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	t.holdDur, _ = m.Float64Histogram("fencelock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lease was held, from its grant to its release or loss."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	t.headroom, _ = m.Float64Histogram("fencelock.renewal.headroom", metric.WithUnit("s"),
		metric.WithDescription("Time left before the local deadline when a renewal succeeded."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	t.renewals, _ = m.Int64Counter("fencelock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Background renewals of leases, held or waiting, by result."))
	t.losses, _ = m.Int64Counter("fencelock.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Held leases lost, by cause."))
	t.held, _ = m.Int64UpDownCounter("fencelock.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held now."))
	t.waiters, _ = m.Int64UpDownCounter("fencelock.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Acquire calls waiting for the backend to grant the lock now."))

	t.common = newAttrs(t.backend)
	t.grantedAttr = attribute.String(attrAcquireResult, acquireResults[resultGranted])
	for w, wait := range []bool{false, true} {
		t.waitAttrs[w] = attribute.Bool(attrAcquireWait, wait)
		for r, result := range acquireResults {
			res := attribute.String(attrAcquireResult, result)
			t.endAttrs[w][r] = []attribute.KeyValue{t.backend, t.waitAttrs[w], res}
			t.acquireSets[w][r] = newAttrs(t.backend, t.waitAttrs[w], res)
		}
	}
	for r, result := range renewalResults {
		t.renewal[r] = newAttrs(t.backend, attribute.String(attrRenewalResult, result))
	}
	for c, cause := range lossCauses {
		if cause != "" {
			t.loss[c] = newAttrs(t.backend, attribute.String(attrLossCause, cause))
		}
	}
	return t
}

// logging reports whether a line at level would be written.
func (t *telemetry) logging(level slog.Level) bool {
	return t.log != nil && t.log.Enabled(context.Background(), level)
}

// acquire is Locker.acquire with its span and its duration recorded.
//
// The span's attributes (fencelock.backend, fencelock.acquire.wait, the
// lock name if allowed) are set with the token and fencelock.acquire.result
// "granted" at the grant (locked), in one call, or with another result at
// the end, which replaces "granted" if the Locker could not keep the grant.
func (t *telemetry) acquire(ctx context.Context, l *Locker, name string, wait bool, opts []Option) (*Lease, error) {
	w := waitIndex(wait)
	var start time.Time
	if t.metrics {
		start = time.Now()
	}
	var span trace.Span
	if t.traces {
		// The span stays in ctx even if the sampler dropped it: the
		// backend's own spans inherit that decision.
		ctx, span = t.tracer.Start(ctx, "fencelock.acquire")
	}
	ls, err := l.acquireLease(ctx, name, wait, opts)
	result := resultOf(err)
	if t.metrics {
		t.acquireDur.Record(ctx, time.Since(start).Seconds(), t.rec(t.acquireSets[w][result], name)...)
	}
	if span != nil {
		if result != resultGranted && span.IsRecording() {
			if t.lockNames {
				span.SetAttributes(append(t.endAttrs[w][result][:3:3], attribute.String(attrLockName, name))...)
			} else {
				span.SetAttributes(t.endAttrs[w][result]...)
			}
		}
		endSpan(span, err, result == resultError)
	}
	if ls != nil {
		t.watchSuspension(ls)
	}
	return ls, err
}

// endSpan ends span, with err recorded as an event if there is one, and
// the span's status Error if failed (neither on a span the sampler
// dropped: nothing is built for it).
func endSpan(span trace.Span, err error, failed bool) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		if failed {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// locking marks the start of the backend's Lock of an acquisition: a
// waiter is counted, and its span gets the event "queued" (the request to
// wait is on its way).
func (t *telemetry) locking(ctx context.Context, name string, wait bool) {
	if !wait {
		return
	}
	if t.metrics {
		t.waiters.Add(ctx, 1, t.add(t.common, name)...)
	}
	if t.traces {
		trace.SpanFromContext(ctx).AddEvent("queued")
	}
}

// waitIndex is the index of an acquisition's wait in the attributes made
// per wait (waitAttrs, endAttrs, acquireSets): 0 for TryAcquire, 1 for
// Acquire.
func waitIndex(wait bool) int {
	if wait {
		return 1
	}
	return 0
}

// locked marks the return of the backend's Lock: the waiter is no longer
// counted, and a grant is the span's event "granted" and its attributes,
// the token and fencelock.acquire.result "granted" with the others.
func (t *telemetry) locked(ctx context.Context, name string, wait bool, token fencing.Token, err error) {
	if wait && t.metrics {
		t.waiters.Add(ctx, -1, t.add(t.common, name)...)
	}
	if err != nil || !t.traces {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("granted")
	w := waitIndex(wait)
	tok := attribute.Int64(attrToken, int64(token))
	if t.lockNames {
		span.SetAttributes(t.backend, t.waitAttrs[w], tok, t.grantedAttr, attribute.String(attrLockName, name))
	} else {
		span.SetAttributes(t.backend, t.waitAttrs[w], tok, t.grantedAttr)
	}
}

// holding marks a lease granted: it is counted as held.
func (t *telemetry) holding(ls *Lease) {
	if t.metrics {
		t.held.Add(context.Background(), 1, t.add(t.common, ls.name)...)
	}
}

// ended records the end of a held lease, held for d, how it ended and why
// (cause). A loss's log line comes before its metrics, so that whoever
// sees the loss counted finds its line logged.
func (t *telemetry) ended(ls *Lease, token int64, d time.Duration, how ending, cause error) {
	if how != endReleased {
		level, msg := slog.LevelWarn, "fencelock: lease lost"
		if how == endClosed {
			level, msg = slog.LevelInfo, "fencelock: lease released by Close"
		}
		if t.logging(level) {
			t.log.LogAttrs(context.Background(), level, msg, t.backendAttr(), slog.String(attrLockName, ls.name),
				slog.Int64(attrToken, token), slog.String(attrLossCause, lossCauses[how]),
				slog.Duration("fencelock.hold", d), slog.Any("error", cause))
		}
	}
	if !t.metrics {
		return
	}
	ctx := context.Background()
	t.held.Add(ctx, -1, t.add(t.common, ls.name)...)
	t.holdDur.Record(ctx, d.Seconds(), t.rec(t.common, ls.name)...)
	if how != endReleased {
		t.losses.Add(ctx, 1, t.add(t.loss[how], ls.name)...)
	}
}

// renewed counts a background renewal of ls that returned err, made
// while the local deadline was deadline.
func (t *telemetry) renewed(ls *Lease, err error, deadline time.Time) {
	if !t.metrics {
		return
	}
	result := renewalOK
	switch {
	case errors.Is(err, ErrLeaseLost):
		result = renewalLost
	case err != nil:
		result = renewalFailed
	}
	ctx := context.Background()
	t.renewals.Add(ctx, 1, t.add(t.renewal[result], ls.name)...)
	if result == renewalOK {
		t.headroom.Record(ctx, time.Until(deadline).Seconds(), t.rec(t.common, ls.name)...)
	}
}

// retrying logs a failed background renewal of the lease ls, still held,
// that will be retried before the local deadline; token is the lease's (0
// while it waits).
//
// It is Info, not Warn: the lease is still held, and most are followed by
// a successful retry; a loss that may follow is the Warn. Not Debug: a run
// of them is what explains that loss, and is worth seeing at the default
// level.
func (t *telemetry) retrying(ls *Lease, token int64, err error, deadline time.Time) {
	if t.logging(slog.LevelInfo) {
		t.log.LogAttrs(context.Background(), slog.LevelInfo, "fencelock: renewal failed, retrying", t.backendAttr(),
			slog.String(attrLockName, ls.name), slog.Int64(attrToken, token),
			slog.Duration("fencelock.deadline_in", time.Until(deadline)), slog.Any("error", err))
	}
}

func (t *telemetry) backendAttr() slog.Attr {
	return slog.String(attrBackend, t.backend.Value.AsString())
}

// watchSuspension logs, with a logger at Info, when the connection of the
// held lease ls is suspended and resumed, on a goroutine that lives as long
// as the lease; on backends that do not report suspension (a nil channel)
// it starts nothing.
func (t *telemetry) watchSuspension(ls *Lease) {
	if !t.logging(slog.LevelInfo) {
		return
	}
	suspended, changed := ls.drv.Suspended()
	if changed == nil {
		return
	}
	token := int64(ls.token)
	go func() {
		for {
			select {
			case <-ls.ctx.Done():
				return
			case <-changed:
			}
			now, next := ls.drv.Suspended()
			if now != suspended {
				msg := "fencelock: connection resumed"
				if now {
					msg = "fencelock: connection suspended, the lease may be lost"
				}
				t.log.LogAttrs(context.Background(), slog.LevelInfo, msg, t.backendAttr(),
					slog.String(attrLockName, ls.name), slog.Int64(attrToken, token))
			}
			suspended, changed = now, next
			if changed == nil {
				return
			}
		}
	}()
}

// release is Lease.Release in its span, with fencelock.backend, the token
// and, if allowed, the lock name.
func (t *telemetry) release(ctx context.Context, ls *Lease) error {
	ctx, span := t.tracer.Start(ctx, "fencelock.release")
	if span.IsRecording() {
		tok := attribute.Int64(attrToken, int64(ls.Token()))
		if t.lockNames {
			span.SetAttributes(t.backend, tok, attribute.String(attrLockName, ls.name))
		} else {
			span.SetAttributes(t.backend, tok)
		}
	}
	err := ls.release(ctx)
	endSpan(span, err, err != nil)
	return err
}
