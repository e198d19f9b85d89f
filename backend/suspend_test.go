package backend

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// suspendDriver is syncDriver whose leases' connection can be suspended
// and resumed, as a ZooKeeper session's.
type suspendDriver struct {
	syncDriver
	mu        sync.Mutex
	suspended bool
	changed   chan struct{}
}

func (d *suspendDriver) NewLease(ctx context.Context, req driver.Request) (driver.Lease, time.Time, error) {
	dl, sent, err := d.syncDriver.NewLease(ctx, req)
	return suspendLease{dl, d}, sent, err
}

func (d *suspendDriver) set(suspended bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.suspended = suspended
	close(d.changed)
	d.changed = make(chan struct{})
}

type suspendLease struct {
	driver.Lease
	d *suspendDriver
}

func (l suspendLease) Suspended() (bool, <-chan struct{}) {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	return l.d.suspended, l.d.changed
}

// lines is a slog.Handler that keeps each message with its level.
type lines struct {
	mu  sync.Mutex
	got []string
}

func (h *lines) Enabled(context.Context, slog.Level) bool { return true }
func (h *lines) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "fencelock.lock.name" || a.Key == "fencelock.token" {
			line += " " + a.Key + "=" + a.Value.String()
		}
		return true
	})
	h.got = append(h.got, line)
	return nil
}
func (h *lines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lines) WithGroup(string) slog.Handler      { return h }

func (h *lines) all() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.got, "\n")
}

// A held lease's connection suspended and resumed is logged at Info with
// the name and token; once the lease ends, nothing more is.
func TestLogSuspension(t *testing.T) {
	d := &suspendDriver{changed: make(chan struct{})}
	h := &lines{}
	l, err := New(d, WithLogger(slog.New(h)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	ls, err := l.Acquire(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	want := "INFO fencelock: connection suspended, the lease may be lost fencelock.lock.name=s fencelock.token=1\n" +
		"INFO fencelock: connection resumed fencelock.lock.name=s fencelock.token=1"
	d.set(true)
	waitFor(t, func() bool { return strings.Count(h.all(), "\n") == 0 && h.all() != "" })
	d.set(false)
	waitFor(t, func() bool { return h.all() == want })
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	d.set(true)
	time.Sleep(50 * time.Millisecond)
	if got := h.all(); got != want {
		t.Errorf("logged\n%s\nwant\n%s", got, want)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not met within 10s")
		}
	}
}
