package conformance

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fencelock/fencelock/backend"
)

// testTelemetry: the metrics a Locker records on this backend (issue 17),
// read through a real OpenTelemetry SDK. Grants count as granted, with
// wait false for TryAcquire and true for Acquire. A lost lease records
// exactly one loss, whose fencelock.loss.cause and "lease lost" log line
// name the cause its error matches (issue 33): a holder whose process
// crashed, deadline (its connection is cut: nothing can tell it the lease
// is gone, its local deadline ends it); a lease never renewed, expired; a
// holder whose lease was revoked (Harness.Revoke), revoked or deleted, as
// the backend can tell (see each adapter's documentation). No lease or
// waiter stays counted. Only the revoked lease's waiter waits for its
// grant: a crashed holder's lock is free only once the server expires it,
// which the HolderCrash case already waits for.
func (s *suite) testTelemetry(t *testing.T) {
	for _, c := range []struct {
		name   string
		causes []string // the loss causes the backend may report
		opts   []backend.Option
		end    func(t *testing.T, l *backend.Locker, ls *backend.Lease)
		waiter bool
	}{
		{"Crash", []string{"deadline"}, nil, func(t *testing.T, l *backend.Locker, _ *backend.Lease) { s.h.Crash(t, l) }, false},
		{"Revoke", []string{"revoked", "deleted"}, nil, func(t *testing.T, _ *backend.Locker, ls *backend.Lease) { s.h.Revoke(t, ls) }, true},
		{"Expire", []string{"expired"}, []backend.Option{backend.WithAutoRenew(false)}, func(*testing.T, *backend.Locker, *backend.Lease) {}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := lockName(t)
			ma, mb := newMeters(), newMeters()
			logs := &lossLogs{}
			a := s.locker(t, ma.option(), backend.WithLogger(slog.New(logs)))
			la := s.try(t, a, name, s.shortTTL(c.opts...)...)
			require.EqualValues(t, 1, ma.count(t, "fencelock.acquire.duration", acquireResult("granted"), acquireWait(false)), "TryAcquire granted")
			require.EqualValues(t, 1, ma.sum(t, "fencelock.leases.held"), "held leases")

			var chB chan result
			if c.waiter {
				chB = goAcquire(t, ctx(t, s.expiry+s.prompt), s.locker(t, mb.option()), name)
				requireWaiting(t, chB, s.settle, "waiter before the holder's end")
			}
			c.end(t, a, la)
			requireClosed(t, la.Done(), s.expiry, "Done of the holder's lease")
			// The loss is recorded just after the signal fires.
			require.Eventually(t, func() bool { return ma.sum(t, "fencelock.losses") > 0 }, s.prompt, 10*time.Millisecond, "no loss recorded")
			require.EqualValues(t, 1, ma.sum(t, "fencelock.losses"), "losses recorded for one lost lease (cause: %v)", la.Err())
			cause := lossCause(la.Err())
			require.Contains(t, c.causes, cause, "the lease ended with %v", la.Err())
			require.EqualValues(t, 1, ma.sum(t, "fencelock.losses", attribute.String("fencelock.loss.cause", cause)), "loss cause (the lease ended with %v)", la.Err())
			require.Equal(t, []string{cause}, logs.causes(), "the log line's cause")
			require.EqualValues(t, 0, ma.sum(t, "fencelock.leases.held"), "held leases after the loss")
			require.EqualValues(t, 1, ma.count(t, "fencelock.hold.duration"), "holds")

			if !c.waiter {
				return
			}
			r := wait(t, chB, s.expiry+s.prompt, "waiter after the holder's end")
			require.NoError(t, r.err)
			require.EqualValues(t, 1, mb.count(t, "fencelock.acquire.duration", acquireResult("granted"), acquireWait(true)), "Acquire granted")
			require.EqualValues(t, 0, mb.sum(t, "fencelock.waiters"), "waiters once granted")
			require.EqualValues(t, 1, mb.sum(t, "fencelock.leases.held"))
			release(t, r.lease)
			require.EqualValues(t, 0, mb.sum(t, "fencelock.leases.held"), "held leases after the release")
			require.EqualValues(t, 0, mb.sum(t, "fencelock.losses"), "a release is no loss")
			require.EqualValues(t, 1, ma.sum(t, "fencelock.losses"), "losses once the holder's clean-up is over")
		})
	}
}

// lossCause is the fencelock.loss.cause that a lease lost with err must
// be recorded with: the sentinel err matches, "" if none.
func lossCause(err error) string {
	for _, c := range []struct {
		err   error
		cause string
	}{{backend.ErrMaxHold, "max_hold"}, {backend.ErrDeadline, "deadline"}, {backend.ErrSessionLost, "session_lost"},
		{backend.ErrRevoked, "revoked"}, {backend.ErrDeleted, "deleted"}, {backend.ErrExpired, "expired"}} {
		if errors.Is(err, c.err) {
			return c.cause
		}
	}
	return ""
}

// lossLogs is a slog.Handler that keeps the fencelock.loss.cause of the
// "fencelock: lease lost" lines.
type lossLogs struct {
	mu   sync.Mutex
	lost []string
}

func (h *lossLogs) Enabled(context.Context, slog.Level) bool { return true }
func (h *lossLogs) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "fencelock: lease lost" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "fencelock.loss.cause" {
			h.mu.Lock()
			h.lost = append(h.lost, a.Value.String())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}
func (h *lossLogs) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lossLogs) WithGroup(string) slog.Handler      { return h }

// causes returns the causes of the loss lines logged so far.
func (h *lossLogs) causes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lost)
}

func acquireResult(r string) attribute.KeyValue {
	return attribute.String("fencelock.acquire.result", r)
}
func acquireWait(w bool) attribute.KeyValue { return attribute.Bool("fencelock.acquire.wait", w) }

// meters is a MeterProvider of the OpenTelemetry SDK with a manual reader,
// for one Locker.
type meters struct {
	r  *sdkmetric.ManualReader
	mp *sdkmetric.MeterProvider
}

func newMeters() *meters {
	r := sdkmetric.NewManualReader()
	return &meters{r: r, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
}

func (m *meters) option() backend.Option { return backend.WithMeterProvider(m.mp) }

// total returns the sum (counters) or the count (histograms) of the
// metric called name recorded so far, over its data points with all of kvs.
func (m *meters) total(t testing.TB, name string, kvs []attribute.KeyValue) (sum int64, count uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, m.r.Collect(context.Background(), &rm))
	match := func(set attribute.Set) bool {
		for _, kv := range kvs {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != name {
				continue
			}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						sum += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						count += p.Count
					}
				}
			default:
				require.Failf(t, "unexpected metric type", "%s is a %T", name, mt.Data)
			}
		}
	}
	return sum, count
}

// sum is the total of the counter name over the points with all of kvs.
func (m *meters) sum(t testing.TB, name string, kvs ...attribute.KeyValue) int64 {
	t.Helper()
	s, _ := m.total(t, name, kvs)
	return s
}

// count is how many values the histogram name holds, over the points with
// all of kvs.
func (m *meters) count(t testing.TB, name string, kvs ...attribute.KeyValue) uint64 {
	t.Helper()
	_, c := m.total(t, name, kvs)
	return c
}
