package servers_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/etcd"
	_ "github.com/fencelock/fencelock/postgres"
	_ "github.com/fencelock/fencelock/redis"
	_ "github.com/fencelock/fencelock/zookeeper"
)

// lockWorks opens a Locker on url, acquires a lock, checks its token and
// releases it. A cluster with a paused or cut-off member may swallow one
// request (a client sent it to that member), so each try has a deadline,
// and it tries again, up to tries times, on a fresh Locker.
func lockWorks(t testing.TB, url string, tries int) {
	t.Helper()
	var errs []error
	for i := 0; i < tries; i++ {
		err := lockOnce(url)
		if err == nil {
			if i > 0 {
				t.Logf("lock cycle on %s worked at try %d (before: %v)", url, i+1, errs)
			}
			return
		}
		errs = append(errs, err)
	}
	t.Fatalf("no lock cycle on %s in %d tries: %v", url, tries, errs)
}

func lockOnce(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := backend.Open(ctx, url)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer l.Close()
	return cycle(ctx, l, 10*time.Second, 5*time.Second)
}

// cycle acquires a lock with ttl on l, checks its token and releases it,
// within d.
func cycle(ctx context.Context, l *backend.Locker, d, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	ls, err := l.Acquire(ctx, "servers-test", backend.WithTTL(ttl))
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if ls.Token() == 0 {
		return fmt.Errorf("token 0")
	}
	if err := ls.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// innerTB is a test of its own inside a test: its failures and cleanups
// stay in it, so a test can check what fails a test and what a failed
// test leaves behind. Logs and temporary directories go to the outer test.
type innerTB struct {
	testing.TB
	mu       sync.Mutex
	failed   bool
	msgs     []string
	cleanups []func()
}

func (f *innerTB) Helper() {}

func (f *innerTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

func (f *innerTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

func (f *innerTB) Fail() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
}

func (f *innerTB) FailNow() { f.Fail(); runtime.Goexit() }

func (f *innerTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *innerTB) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }

func (f *innerTB) Fatalf(format string, args ...any) { f.Errorf(format, args...); runtime.Goexit() }

func (f *innerTB) Fatal(args ...any) { f.Error(args...); runtime.Goexit() }

// runInner runs body as an inner test, then its cleanups (last first, as
// testing does), and returns whether it failed and its messages.
func runInner(t testing.TB, body func(tb testing.TB)) (failed bool, msgs []string) {
	in := &innerTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(in)
	}()
	<-done
	for i := len(in.cleanups) - 1; i >= 0; i-- {
		in.cleanups[i]()
	}
	return in.failed, in.msgs
}
