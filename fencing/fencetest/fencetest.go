// Package fencetest is the conformance suite every fencing.Guard runs: the
// properties that make a token check worth having.
//
//   - a write with a token lower than one already admitted is rejected with a
//     *fencing.StaleTokenError naming the winner, and its effect never lands;
//   - equal tokens pass (one holder writes many times under one grant);
//   - a failed write does not raise the highest token, and in a
//     transactional guard its staged effect does not land;
//   - concurrent writers with interleaved tokens never leave state written by
//     a lower token after a higher one (checked per completed write and on
//     the final state);
//   - the zero token is rejected with fencing.ErrInvalidToken;
//   - resources are independent;
//   - after a restart of the store (a new Guard over the same durable state,
//     and where the harness can, a restart of the server) the highest token
//     is still known.
//
// A guard's test supplies a Store: the Guard plus how a write stages a value
// inside Do (the part that must be atomic with the check) and how to read it
// back.
package fencetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
)

// Store is a Guard under test with a way to write and read one value per
// resource.
type Store interface {
	fencing.Guard
	// Put returns the write function to pass to Do that sets resource's
	// value. It must take effect only if Do admits the token.
	Put(resource, value string) func(ctx context.Context) error
	// Get returns resource's value ("" if never written).
	Get(ctx context.Context, resource string) (string, error)
}

// Harness opens stores over the durable state of one test.
type Harness struct {
	// Open returns a new Store over the test's state. Called more than once
	// per test, every Store sees the same state. Close what it opens with
	// t.Cleanup.
	Open func(t *testing.T) Store
	// Restart, if set, restarts the store's server or process, keeping its
	// durable state. Stores opened earlier may stop working.
	Restart func(t *testing.T)
	// Volatile says the state does not survive a new Store (fencing.Memory):
	// the restart case is not run.
	Volatile bool
	// Rollback says a write's staged effect is discarded when the write
	// function then fails (every transactional guard; not fencing.Memory,
	// whose write function acts directly).
	Rollback bool
	// Writers and Rounds size the concurrency case (defaults 8 and 40).
	Writers, Rounds int
}

// Run runs the suite. Each case calls h.Open for a fresh state only through
// the subtest's t, so harnesses may give every subtest its own database,
// directory or key prefix.
func Run(t *testing.T, h Harness) {
	t.Run("RejectsLowerToken", func(t *testing.T) { rejectsLower(t, h) })
	t.Run("EqualTokensPass", func(t *testing.T) { equalPass(t, h) })
	t.Run("FailedWriteDoesNotRecord", func(t *testing.T) { failedWrite(t, h) })
	t.Run("AdmitWithoutWrite", func(t *testing.T) { admitOnly(t, h) })
	t.Run("ZeroTokenRejected", func(t *testing.T) { zeroToken(t, h) })
	t.Run("ResourcesIndependent", func(t *testing.T) { independent(t, h) })
	t.Run("ConcurrentWritersNeverGoBackwards", func(t *testing.T) { concurrent(t, h) })
	if !h.Volatile {
		t.Run("NewStoreKeepsHighest", func(t *testing.T) { restart(t, h, false) })
		if h.Restart != nil {
			t.Run("ServerRestartKeepsHighest", func(t *testing.T) { restart(t, h, true) })
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func put(ctx context.Context, s Store, res string, tok fencing.Token, v string) error {
	return s.Do(ctx, res, tok, s.Put(res, v))
}

func mustGet(t *testing.T, ctx context.Context, s Store, res, want string) {
	t.Helper()
	got, err := s.Get(ctx, res)
	if err != nil {
		t.Fatalf("Get(%q): %v", res, err)
	}
	if got != want {
		t.Fatalf("Get(%q) = %q, want %q", res, got, want)
	}
}

func mustStale(t *testing.T, err error, res string, tok, highest fencing.Token) {
	t.Helper()
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("write with token %d: err = %v, want ErrStaleToken", tok, err)
	}
	var st *fencing.StaleTokenError
	if !errors.As(err, &st) {
		t.Fatalf("write with token %d: err = %T %v, want a *fencing.StaleTokenError", tok, err, err)
	}
	if st.Token != tok || st.Resource != res || st.Highest < highest {
		t.Fatalf("StaleTokenError = %+v, want Resource %q, Token %d, Highest >= %d", *st, res, tok, highest)
	}
}

func rejectsLower(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.Open(t)
	if err := put(ctx, s, "doc", 34, "by 34"); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := s.Do(ctx, "doc", 33, func(ctx context.Context) error { ran = true; return s.Put("doc", "by 33")(ctx) })
	mustStale(t, err, "doc", 33, 34)
	if ran {
		t.Fatal("the write of a stale token ran")
	}
	mustGet(t, ctx, s, "doc", "by 34")
	if err := put(ctx, s, "doc", 35, "by 35"); err != nil {
		t.Fatal(err)
	}
	mustStale(t, put(ctx, s, "doc", 34, "by 34 again"), "doc", 34, 35)
	mustGet(t, ctx, s, "doc", "by 35")
}

func equalPass(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.Open(t)
	for i, v := range []string{"one", "two", "three"} {
		if err := put(ctx, s, "doc", 7, v); err != nil {
			t.Fatalf("write %d with the same token: %v", i, err)
		}
	}
	mustGet(t, ctx, s, "doc", "three")
}

func failedWrite(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.Open(t)
	if err := put(ctx, s, "doc", 5, "by 5"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := s.Do(ctx, "doc", 9, func(ctx context.Context) error {
		if h.Rollback {
			if err := s.Put("doc", "by 9, failed")(ctx); err != nil {
				return err
			}
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failed write: err = %v, want the write's error", err)
	}
	mustGet(t, ctx, s, "doc", "by 5")
	if err := put(ctx, s, "doc", 6, "by 6"); err != nil {
		t.Fatalf("a failed write with token 9 raised the highest token: token 6 then got %v", err)
	}
	mustGet(t, ctx, s, "doc", "by 6")
}

func admitOnly(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.Open(t)
	if err := put(ctx, s, "doc", 3, "by 3"); err != nil {
		t.Fatal(err)
	}
	if err := fencing.Admit(ctx, s, "doc", 4); err != nil {
		t.Fatal(err)
	}
	mustGet(t, ctx, s, "doc", "by 3")
	mustStale(t, put(ctx, s, "doc", 3, "by 3 again"), "doc", 3, 4)
	mustGet(t, ctx, s, "doc", "by 3")
}

func zeroToken(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.Open(t)
	if err := put(ctx, s, "doc", 0, "no token"); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Fatalf("token 0: err = %v, want ErrInvalidToken", err)
	}
	mustGet(t, ctx, s, "doc", "")
}

func independent(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.Open(t)
	if err := put(ctx, s, "a", 100, "a100"); err != nil {
		t.Fatal(err)
	}
	if err := put(ctx, s, "b", 1, "b1"); err != nil {
		t.Fatalf("resource b rejected token 1 after a admitted 100: %v", err)
	}
	mustGet(t, ctx, s, "a", "a100")
	mustGet(t, ctx, s, "b", "b1")
}

// concurrent runs writers whose tokens interleave; the value is the writer's
// token. Linearizability of admissions: a write that starts after a write
// with a higher token completed must be rejected, and after any admitted
// write the stored value never holds a lower token.
func concurrent(t *testing.T, h Harness) {
	writers, rounds := h.Writers, h.Rounds
	if writers == 0 {
		writers = 8
	}
	if rounds == 0 {
		rounds = 40
	}
	ctx := ctxT(t)
	stores := make([]Store, writers)
	for i := range stores {
		stores[i] = h.Open(t)
	}
	var completed atomic.Uint64 // highest token whose write has returned nil
	var maxOK atomic.Uint64
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			s := stores[w]
			for i := 0; i < rounds; i++ {
				tok := fencing.Token(i*writers + (writers - 1 - w) + 1)
				before := completed.Load()
				err := put(ctx, s, "doc", tok, tok.String())
				if err != nil {
					if !errors.Is(err, fencing.ErrStaleToken) {
						fail("writer %d token %d: %v", w, tok, err)
						return
					}
					continue
				}
				admitted.Add(1)
				if uint64(tok) < before {
					fail("token %d admitted although token %d had been admitted before it started", tok, before)
				}
				for {
					c := completed.Load()
					if uint64(tok) <= c || completed.CompareAndSwap(c, uint64(tok)) {
						break
					}
				}
				for {
					c := maxOK.Load()
					if uint64(tok) <= c || maxOK.CompareAndSwap(c, uint64(tok)) {
						break
					}
				}
				v, err := s.Get(ctx, "doc")
				if err != nil {
					fail("get: %v", err)
					return
				}
				if got, _ := strconv.ParseUint(v, 10, 64); got < uint64(tok) {
					fail("after token %d was admitted the value is %q, written by a lower token", tok, v)
				}
			}
		}(w)
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if admitted.Load() == 0 {
		t.Fatal("no write was admitted")
	}
	mustGet(t, ctx, stores[0], "doc", strconv.FormatUint(maxOK.Load(), 10))
	t.Logf("%d of %d writes admitted", admitted.Load(), writers*rounds)
}

func restart(t *testing.T, h Harness, server bool) {
	ctx, s := ctxT(t), h.Open(t)
	if err := put(ctx, s, "doc", 10, "by 10"); err != nil {
		t.Fatal(err)
	}
	if err := fencing.Admit(ctx, s, "other", 20); err != nil {
		t.Fatal(err)
	}
	if server {
		h.Restart(t)
	}
	s2 := h.Open(t)
	mustStale(t, put(ctx, s2, "doc", 9, "by 9"), "doc", 9, 10)
	mustStale(t, put(ctx, s2, "other", 19, "by 19"), "other", 19, 20)
	mustGet(t, ctx, s2, "doc", "by 10")
	if err := put(ctx, s2, "doc", 10, "by 10 again"); err != nil {
		t.Fatalf("the same token after the restart: %v", err)
	}
	mustGet(t, ctx, s2, "doc", "by 10 again")
}
