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
//   - a token admitted while a write runs either waits for that write (the
//     guard holds the resource) or makes it stale, and then what the write
//     did through the store's handle is discarded;
//   - after a restart of the store (a new Guard over the same durable state,
//     and where the harness can, a restart of the server) the highest token
//     is still known;
//   - a write that was applied but whose answer was lost (a proxy holds
//     it, then drops the connection) while a newer token was admitted is
//     never reported as stale: Do returns nil or an error matching
//     fencing.ErrOutcomeUnknown (guards whose harness gives a Remote);
//   - with a fencing.Telemetry, every Do is reported as accepted, stale,
//     unknown or error, with its duration and a span the write function runs in, to a
//     real OpenTelemetry SDK (Recorder, which guards outside the suite can
//     use too).
//
// A guard's test supplies a Store: the guard as a fencing.StoreGuard[S], with
// S its store handle (*sql.Tx, *redisfence.Batch, ...), plus how a write
// stages a value through that handle (the part that must be atomic with the
// check) and how to read it back. A Store that also has a Gate method (the
// guard as a plain fencing.Guard) gets that adapter checked too.
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

// Store is a guard under test, whose write functions get the store handle
// S, with a way to write and read one value per resource.
type Store[S any] interface {
	fencing.StoreGuard[S]
	// Admit records token for resource without a write of its own.
	Admit(ctx context.Context, resource string, token fencing.Token) error
	// Put returns the write function to pass to Do that sets resource's
	// value through the handle it is given. It must take effect only if Do
	// admits the token.
	Put(resource, value string) func(ctx context.Context, s S) error
	// Get returns resource's value ("" if never written).
	Get(ctx context.Context, resource string) (string, error)
}

// Gater is implemented by a Store that also offers its guard as a plain
// fencing.Guard; Run then checks that adapter's token handling.
type Gater interface {
	// Gate returns the store's guard as a fencing.Guard.
	Gate() fencing.Guard
}

// Link is the network between a Store and its store's server, as a fault
// proxy controls it (internal/faultproxy.Proxy is one).
type Link interface {
	// HoldReplies lets requests through and holds what the server
	// answers, until Heal.
	HoldReplies()
	// Drop closes every connection through the link: what it held is lost.
	Drop()
	// Heal forwards again, both ways.
	Heal()
}

// Harness opens stores over the durable state of one test.
type Harness[S any] struct {
	// Open returns a new Store over the test's state, whose guard reports
	// to tel (its package's WithTelemetry option; the zero Telemetry in
	// every case but the telemetry one). Called more than once per test,
	// every Store sees the same state. Close what it opens with t.Cleanup.
	Open func(t *testing.T, tel fencing.Telemetry) Store[S]
	// Kind is the guard's fencelock.guard.kind attribute ("sql", "redis",
	// ...), which the telemetry case expects.
	Kind string
	// Unreachable, if set, returns a guard like Open's, reporting to tel,
	// whose store cannot be reached (no server listens at its address, its
	// directory is gone): the telemetry case expects its Do to fail within
	// a few seconds and be counted as an error.
	Unreachable func(t *testing.T, tel fencing.Telemetry) fencing.StoreGuard[S]
	// Remote, if set, returns a Store like Open's, over the same state as
	// Open's Stores in the same test, whose connections to the store's
	// server go through the returned Link, with the client configured as
	// users run it (go-redis's default retries, for one). The LostAnswer
	// case drops the answer of a write on it.
	Remote func(t *testing.T) (Store[S], Link)
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
func Run[S any](t *testing.T, h Harness[S]) {
	t.Run("RejectsLowerToken", func(t *testing.T) { rejectsLower(t, h) })
	t.Run("EqualTokensPass", func(t *testing.T) { equalPass(t, h) })
	t.Run("FailedWriteDoesNotRecord", func(t *testing.T) { failedWrite(t, h) })
	t.Run("AdmitWithoutWrite", func(t *testing.T) { admitOnly(t, h) })
	t.Run("ZeroTokenRejected", func(t *testing.T) { zeroToken(t, h) })
	t.Run("ResourcesIndependent", func(t *testing.T) { independent(t, h) })
	t.Run("HigherTokenDuringWrite", func(t *testing.T) { higherDuringWrite(t, h) })
	t.Run("ConcurrentWritersNeverGoBackwards", func(t *testing.T) { concurrent(t, h) })
	t.Run("Gate", func(t *testing.T) { gate(t, h) })
	t.Run("Telemetry", func(t *testing.T) { telemetry(t, h) })
	if h.Remote != nil {
		t.Run("LostAnswer", func(t *testing.T) { LostAnswer(t, h) })
	}
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

func put[S any](ctx context.Context, s Store[S], res string, tok fencing.Token, v string) error {
	return s.Do(ctx, res, tok, s.Put(res, v))
}

func mustGet[S any](t *testing.T, ctx context.Context, s Store[S], res, want string) {
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

func rejectsLower[S any](t *testing.T, h Harness[S]) {
	ctx, s := ctxT(t), h.Open(t, fencing.Telemetry{})
	if err := put(ctx, s, "doc", 34, "by 34"); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := s.Do(ctx, "doc", 33, func(ctx context.Context, st S) error { ran = true; return s.Put("doc", "by 33")(ctx, st) })
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

func equalPass[S any](t *testing.T, h Harness[S]) {
	ctx, s := ctxT(t), h.Open(t, fencing.Telemetry{})
	for i, v := range []string{"one", "two", "three"} {
		if err := put(ctx, s, "doc", 7, v); err != nil {
			t.Fatalf("write %d with the same token: %v", i, err)
		}
	}
	mustGet(t, ctx, s, "doc", "three")
}

func failedWrite[S any](t *testing.T, h Harness[S]) {
	ctx, s := ctxT(t), h.Open(t, fencing.Telemetry{})
	if err := put(ctx, s, "doc", 5, "by 5"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := s.Do(ctx, "doc", 9, func(ctx context.Context, st S) error {
		if h.Rollback {
			if err := s.Put("doc", "by 9, failed")(ctx, st); err != nil {
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

func admitOnly[S any](t *testing.T, h Harness[S]) {
	ctx, s := ctxT(t), h.Open(t, fencing.Telemetry{})
	if err := put(ctx, s, "doc", 3, "by 3"); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(ctx, "doc", 4); err != nil {
		t.Fatal(err)
	}
	mustGet(t, ctx, s, "doc", "by 3")
	mustStale(t, put(ctx, s, "doc", 3, "by 3 again"), "doc", 3, 4)
	mustGet(t, ctx, s, "doc", "by 3")
}

func zeroToken[S any](t *testing.T, h Harness[S]) {
	ctx, s := ctxT(t), h.Open(t, fencing.Telemetry{})
	if err := put(ctx, s, "doc", 0, "no token"); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Fatalf("token 0: err = %v, want ErrInvalidToken", err)
	}
	mustGet(t, ctx, s, "doc", "")
}

func independent[S any](t *testing.T, h Harness[S]) {
	ctx, s := ctxT(t), h.Open(t, fencing.Telemetry{})
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
func concurrent[S any](t *testing.T, h Harness[S]) {
	writers, rounds := h.Writers, h.Rounds
	if writers == 0 {
		writers = 8
	}
	if rounds == 0 {
		rounds = 40
	}
	ctx := ctxT(t)
	stores := make([]Store[S], writers)
	for i := range stores {
		stores[i] = h.Open(t, fencing.Telemetry{})
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

func restart[S any](t *testing.T, h Harness[S], server bool) {
	ctx, s := ctxT(t), h.Open(t, fencing.Telemetry{})
	if err := put(ctx, s, "doc", 10, "by 10"); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(ctx, "other", 20); err != nil {
		t.Fatal(err)
	}
	if server {
		h.Restart(t)
	}
	s2 := h.Open(t, fencing.Telemetry{})
	mustStale(t, put(ctx, s2, "doc", 9, "by 9"), "doc", 9, 10)
	mustStale(t, put(ctx, s2, "other", 19, "by 19"), "other", 19, 20)
	mustGet(t, ctx, s2, "doc", "by 10")
	if err := put(ctx, s2, "doc", 10, "by 10 again"); err != nil {
		t.Fatalf("the same token after the restart: %v", err)
	}
	mustGet(t, ctx, s2, "doc", "by 10 again")
}

// higherDuringWrite admits a higher token from a second store while a write
// runs. A guard that holds the resource across the write (a row lock, a
// flock, a mutex) makes the admission wait, and the write lands; a guard
// that does not (a Redis script, an etcd Txn, sent after the write
// function returns) must reject the write as stale and discard what it
// staged through the handle.
func higherDuringWrite[S any](t *testing.T, h Harness[S]) {
	ctx, s, s2 := ctxT(t), h.Open(t, fencing.Telemetry{}), h.Open(t, fencing.Telemetry{})
	if err := put(ctx, s, "doc", 5, "by 5"); err != nil {
		t.Fatal(err)
	}
	admitted := make(chan error, 1)
	raced := false
	err := s.Do(ctx, "doc", 5, func(wctx context.Context, st S) error {
		go func() { admitted <- s2.Admit(ctx, "doc", 6) }()
		select {
		case err := <-admitted:
			if err != nil {
				return fmt.Errorf("admitting token 6 during the write: %w", err)
			}
			raced = true // the guard does not hold the resource while write runs
		case <-time.After(300 * time.Millisecond):
			// the admission waits for this write: the guard holds the resource
		}
		return s.Put("doc", "by 5 during 6")(wctx, st)
	})
	switch {
	case err == nil:
		if raced {
			t.Fatal("token 6 was admitted while the write with token 5 ran, and the write was still accepted")
		}
		if err := <-admitted; err != nil {
			t.Fatalf("token 6 after the write: %v", err)
		}
		mustGet(t, ctx, s, "doc", "by 5 during 6")
	case errors.Is(err, fencing.ErrStaleToken):
		// token 6 was admitted first: what the write staged must be gone
		mustStale(t, err, "doc", 5, 6)
		mustGet(t, ctx, s, "doc", "by 5")
	default:
		t.Fatalf("write while token 6 is admitted: %v", err)
	}
	mustStale(t, put(ctx, s, "doc", 5, "by 5 again"), "doc", 5, 6)
	if err == nil {
		t.Log("the guard held the resource while the write ran: token 6 waited")
	} else {
		t.Log("token 6 was admitted while the write ran: the write was discarded")
	}
}

// gate checks the fencing.Guard adapter of a Store that has one: it admits
// and rejects tokens like Do, runs its write function only for an admitted
// token, records nothing when that function fails, and leaves the value
// alone (its write function has no handle to the store).
func gate[S any](t *testing.T, h Harness[S]) {
	ctx, s := ctxT(t), h.Open(t, fencing.Telemetry{})
	gs, ok := any(s).(Gater)
	if !ok {
		t.Skip("the store has no Gate")
	}
	g := gs.Gate()
	if err := put(ctx, s, "doc", 5, "by 5"); err != nil {
		t.Fatal(err)
	}
	ran := false
	mustStale(t, g.Do(ctx, "doc", 4, func(context.Context) error { ran = true; return nil }), "doc", 4, 5)
	if ran {
		t.Fatal("the gate ran the write function of a stale token")
	}
	boom := errors.New("boom")
	if err := g.Do(ctx, "doc", 9, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed gate write: err = %v, want the write's error", err)
	}
	if err := g.Do(ctx, "doc", 6, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("gate with token 6: err = %v, ran = %v", err, ran)
	}
	if err := fencing.Admit(ctx, g, "doc", 6); err != nil {
		t.Fatalf("fencing.Admit through the gate with an equal token: %v", err)
	}
	if err := g.Do(ctx, "doc", 0, func(context.Context) error { return nil }); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Fatalf("gate with token 0: err = %v, want ErrInvalidToken", err)
	}
	mustGet(t, ctx, s, "doc", "by 5")
	mustStale(t, put(ctx, s, "doc", 5, "by 5 again"), "doc", 5, 6)
}

// LostAnswer is the suite's case for a write whose answer is lost, which
// Run runs when h has a Remote; a harness that cannot run the whole suite
// (httpfence's, whose guard is a server) runs it alone. It needs h.Open and
// h.Remote.
//
// A write goes through the Remote store: its request reaches the server
// and is applied, and the Link holds the answer. A newer holder then writes
// with a higher token through an Open store, and the Link drops the
// connections (the answer is lost) and heals, so that a client that
// retries finds the newer token. Do must return nil (it learned that its
// write landed) or an error matching fencing.ErrOutcomeUnknown: never a
// stale rejection, because the write landed. The newer holder's value
// stays, and the Remote store, working again, rejects its old token.
func LostAnswer[S any](t *testing.T, h Harness[S]) {
	ctx := ctxT(t)
	s, link := h.Remote(t)
	defer link.Heal() // on every way out: nothing stays held
	direct := h.Open(t, fencing.Telemetry{})
	// A first write over the link: a connection is made, and scripts and
	// statements are cached, so that no handshake's answer is held.
	if err := put(ctx, s, "doc", 5, "by 5"); err != nil {
		t.Fatal(err)
	}
	const landed = "by 5, answer lost"
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Do(ctx, "doc", 5, func(ctx context.Context, st S) error {
			if err := s.Put("doc", landed)(ctx, st); err != nil {
				return err
			}
			// What the guard sends from now on (the script, the Txn, the
			// COMMIT, the request) passes; its answer is held.
			link.HoldReplies()
			close(held)
			return nil
		})
	}()
	var err error
	returned := false
	for {
		select {
		case err = <-done:
			returned = true
		case <-time.After(10 * time.Millisecond):
		}
		if returned {
			break
		}
		select {
		case <-held:
		default:
			continue // the write function has not run yet
		}
		v, gerr := direct.Get(ctx, "doc")
		if gerr != nil {
			t.Fatalf("reading back: %v", gerr)
		}
		if v == landed {
			break
		}
	}
	if returned {
		t.Fatalf("Do returned before its write landed, with its answer held: %v", err)
	}
	// The write landed and its answer is held: a newer holder writes.
	if err := put(ctx, direct, "doc", 6, "by 6"); err != nil {
		t.Fatalf("the newer holder's write: %v", err)
	}
	link.Drop() // the answer is lost
	link.Heal() // and a retry would get through
	err = <-done
	switch {
	case err == nil:
		t.Log("Do learned that its write landed")
	case errors.Is(err, fencing.ErrStaleToken):
		t.Fatalf("a write that landed was reported stale after its answer was lost: %v", err)
	case errors.Is(err, fencing.ErrOutcomeUnknown):
		t.Logf("Do says the outcome is unknown: %v", err)
	default:
		t.Fatalf("a write that landed, its answer lost: err = %v, want nil or fencing.ErrOutcomeUnknown", err)
	}
	mustGet(t, ctx, direct, "doc", "by 6")
	mustStale(t, put(ctx, s, "doc", 5, "by 5, later"), "doc", 5, 6)
	mustGet(t, ctx, direct, "doc", "by 6")
}
