package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/dialhook"
	"github.com/fencelock/fencelock/redis"
)

// workerEnv carries a worker's spec (JSON) to the re-executed process.
const workerEnv = "FENCELOCK_CHAOS_WORKER"

// workerSpec is one worker's part of a campaign.
type workerSpec struct {
	ID      int           `json:"id"`
	URL     string        `json:"url"` // through this worker's proxies
	Name    string        `json:"name"`
	TTL     time.Duration `json:"ttl"`
	HoldMax time.Duration `json:"hold_max"`
	Guard   guardSpec     `json:"guard"`
	Redis   RedisClient   `json:"redis_client"`
	// Sentinel, if set: Addr and Hosts name this worker's proxies.
	Sentinel *Sentinel `json:"sentinel,omitempty"`
	// Hosts, if set, maps every address the URL's client may dial to
	// this worker's proxy to it (see campaign.nodes).
	Hosts map[string]string `json:"hosts,omitempty"`
	Seed  int64             `json:"seed"`
}

// WorkerMain runs a campaign's worker and exits if this process is one
// (the campaign re-executes the running program with $FENCELOCK_CHAOS_WORKER
// set); otherwise it returns at once. Call it first thing in main, or in
// TestMain before m.Run, in every program that runs campaigns. A worker
// exits 0 after SIGTERM, 2 if it cannot start.
func WorkerMain() {
	raw, ok := os.LookupEnv(workerEnv)
	if !ok {
		return
	}
	var s workerSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker: bad $%s: %v\n", workerEnv, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	w := &worker{spec: s, out: json.NewEncoder(os.Stdout), rng: rand.New(rand.NewPCG(uint64(s.Seed), uint64(s.ID)))}
	if err := w.run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker %d: %v\n", s.ID, err)
		os.Exit(2)
	}
	os.Exit(0)
}

type worker struct {
	spec workerSpec
	rng  *rand.Rand

	mu  sync.Mutex // out, seq
	out *json.Encoder
	seq int64
}

// emit writes one record, stamped now.
func (w *worker) emit(e Event) { w.emitAt(e, time.Time{}) }

// emitAt writes one record, stamped now or at, whichever is earlier (a
// zero at is now).
func (w *worker) emitAt(e Event, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.Worker = w.spec.ID
	e.Time = time.Now().UnixNano()
	if !at.IsZero() {
		e.Time = min(e.Time, at.UnixNano())
	}
	_ = w.out.Encode(e) // a write to a closed pipe: the campaign is over
}

// step records the invocation of op, runs it, and records its outcome,
// with the token *tok holds then (Acquire's f sets it).
func (w *worker) step(op string, tok *fencing.Token, value int64, f func() (int64, error)) (int64, error) {
	w.mu.Lock()
	w.seq++
	seq := w.seq
	w.mu.Unlock()
	w.emit(Event{Op: op, Seq: seq, Phase: phaseInvoke, Token: uint64(*tok), Value: value})
	v, err := f()
	e := Event{Op: op, Seq: seq, Phase: phaseOK, Token: uint64(*tok), Value: v}
	switch {
	case errors.Is(err, fencing.ErrStaleToken):
		e.Phase = phaseStale
	case err != nil:
		e.Phase, e.Err = phaseError, err.Error()
	}
	w.emit(e)
	return v, err
}

func (w *worker) run(ctx context.Context) error {
	locker, store, err := w.open(ctx)
	if err != nil {
		return err
	}
	defer locker.Close()
	defer store.Close()
	w.emit(Event{Op: opStart, Phase: phaseOK})
	for ctx.Err() == nil {
		w.round(ctx, locker, store)
	}
	return nil
}

// startRetry bounds how long a worker tries to open its Locker and its
// counter: under the minute the campaign waits for a worker's start.
const startRetry = 45 * time.Second

// open opens the worker's Locker and counter. A worker started in place of
// one that died may start in the middle of a fault (seen: a PostgreSQL
// failover under load, the new workers' opens refused, counted as workers
// that exited unbidden): as a service restarted during an outage would, it
// tries again until startRetry has passed, except after an error that
// says its spec is wrong, for which it gives up at once.
func (w *worker) open(ctx context.Context) (*backend.Locker, counter, error) {
	until := time.Now().Add(startRetry)
	pause := 100 * time.Millisecond
	for {
		locker, store, err := w.openOnce(ctx, until)
		if err == nil {
			return locker, store, nil
		}
		if errors.Is(err, backend.ErrInvalidOption) || errors.Is(err, backend.ErrPermission) ||
			ctx.Err() != nil || time.Now().Add(pause).After(until) {
			return nil, nil, err
		}
		fmt.Fprintf(os.Stderr, "chaos worker %d: not started yet, trying again: %v\n", w.spec.ID, err)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// openOnce opens the worker's Locker and counter once, by until.
func (w *worker) openOnce(ctx context.Context, until time.Time) (*backend.Locker, counter, error) {
	octx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	locker, err := openLocker(octx, w.spec)
	if err != nil {
		return nil, nil, err
	}
	store, err := openCounter(octx, w.spec.Guard)
	if err != nil {
		locker.Close()
		return nil, nil, err
	}
	return locker, store, nil
}

// openLocker opens the worker's Locker as its spec says.
func openLocker(ctx context.Context, s workerSpec) (*backend.Locker, error) {
	if s.Hosts != nil {
		var d net.Dialer
		ctx = dialhook.With(ctx, func(ctx context.Context, network, addr string) (net.Conn, error) {
			to, ok := s.Hosts[addr]
			if !ok {
				// Dialled directly, it would escape the faults.
				return nil, fmt.Errorf("chaos: the servers name %s, which the campaign did not find at its start (redis.Nodes)", addr)
			}
			return d.DialContext(ctx, network, to)
		})
	}
	if s.Redis == RedisClientURL && s.Sentinel == nil {
		return backend.Open(ctx, s.URL)
	}
	opt, cfg, err := redis.ParseURL(s.URL)
	if err != nil {
		return nil, err
	}
	var c *goredis.Client
	if sn := s.Sentinel; sn != nil {
		var d net.Dialer
		c = goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName: sn.Master, SentinelAddrs: []string{sn.Addr},
			Username: opt.Username, Password: opt.Password, DB: opt.DB, ContextTimeoutEnabled: true,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				to, ok := sn.Hosts[addr]
				if !ok && addr != sn.Addr {
					// Dialled directly, it would escape the faults.
					return nil, fmt.Errorf("chaos: the Sentinel names %s, which the campaign's Sentinel.Hosts does not map", addr)
				}
				if ok {
					addr = to
				}
				return d.DialContext(ctx, network, addr)
			},
		})
	} else {
		c = goredis.NewClient(&goredis.Options{Addr: opt.Addr, Username: opt.Username, Password: opt.Password, DB: opt.DB,
			ContextTimeoutEnabled: s.Redis == RedisClientDocs})
	}
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, err
	}
	l, err := redis.New(c, cfg)
	if err != nil {
		c.Close()
	}
	return l, err // the process's end closes c
}

// round is one grant: acquire, admit, read, hold, write, release. Each
// step but Acquire runs to its end whatever the lease does meanwhile.
func (w *worker) round(ctx context.Context, locker *backend.Locker, store counter) {
	s := w.spec
	var lease *backend.Lease
	var tok fencing.Token
	_, err := w.step(opAcquire, &tok, 0, func() (int64, error) {
		var err error
		lease, err = locker.Acquire(ctx, s.Name, backend.WithTTL(s.TTL))
		if err == nil {
			tok = lease.Token()
		}
		return 0, err
	})
	if err != nil {
		sleepCtx(ctx, 20*time.Millisecond) // an unreachable backend fails fast: do not spin
		return
	}
	var released sync.WaitGroup
	released.Add(1)
	go func() {
		defer released.Done()
		<-lease.Done()
		if cause := lease.Err(); !errors.Is(cause, backend.ErrReleased) {
			// The signal fired at the local deadline if that ended the
			// lease; this goroutine may run later on a busy machine.
			e := Event{Op: opLost, Phase: phaseOK, Token: uint64(tok), Err: cause.Error()}
			w.emitAt(e, lease.Deadline())
		}
	}()
	// Steps run on a context of their own, not the lease's: a holder that
	// has not noticed its loss still writes.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*s.TTL+10*time.Second)
	defer cancel()
	if _, err := w.step(opAdmit, &tok, 0, func() (int64, error) { return 0, store.Admit(sctx, tok) }); err == nil {
		v, err := w.step(opRead, &tok, 0, func() (int64, error) { return store.Read(sctx) })
		if err == nil {
			sleepCtx(sctx, time.Duration(w.rng.Int64N(int64(s.HoldMax)+1)))
			_, _ = w.step(opWrite, &tok, v+1, func() (int64, error) { return v + 1, store.Write(sctx, tok, v+1) })
		}
	}
	_, _ = w.step(opRelease, &tok, 0, func() (int64, error) { return 0, lease.Release(sctx) })
	released.Wait()
}
