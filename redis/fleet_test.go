package redis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// Mixed fleets: a service that moves from redsync or bsm/redislock to
// fencelock runs both on the same keys for a while. The foreign clients run
// here in child processes (the test binary run again, see foreignChild), so
// that their releases reach the server from another process, with nothing
// shared with the waiter but Redis.

// foreignChildEnv selects the child mode of the test binary: the library the
// child locks with ("redislock" or "redsync"). FENCELOCK_FOREIGN_ADDR is the
// server, FENCELOCK_FOREIGN_KEY the lock key, FENCELOCK_FOREIGN_TTL the
// expiry of the child's locks in ms.
const foreignChildEnv = "FENCELOCK_FOREIGN_CHILD"

// foreignTTL is the expiry of the children's locks: longer than any bound
// the tests assert, so that a waiter of ours cannot pass them through its
// fallback timer (the key's PTTL), only by noticing the release.
const foreignTTL = 15 * time.Second

// foreignWork is how long the hammering child holds each lock it obtains:
// the key is free only for the moment between its release and its next
// obtain (about one round trip), so a waiter that tries once or twice (on
// its fallback timer) almost never finds it free.
const foreignWork = 2 * time.Millisecond

// foreignLock is one lock of a foreign library.
type foreignLock interface {
	// obtain tries once, without waiting.
	obtain(ctx context.Context) (bool, error)
	// wait obtains with the library's own retries, at its usual interval
	// (see foreignRetry).
	wait(ctx context.Context) error
	release(ctx context.Context) error
}

// foreignRetry is the retry interval of a foreign child's wait: redislock's
// README example (LinearBackoff(100ms)); redsync waits its default retry
// delay, drawn at random from 50-250ms.
const foreignRetry = 100 * time.Millisecond

type redislockLock struct {
	c    *redislock.Client
	key  string
	ttl  time.Duration
	held *redislock.Lock
}

func (l *redislockLock) obtain(ctx context.Context) (bool, error) {
	lk, err := l.c.Obtain(ctx, l.key, l.ttl, nil) // nil options: no retry
	if errors.Is(err, redislock.ErrNotObtained) {
		return false, nil
	}
	l.held = lk
	return err == nil, err
}

func (l *redislockLock) wait(ctx context.Context) (err error) {
	l.held, err = l.c.Obtain(ctx, l.key, l.ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(foreignRetry)})
	return err
}

func (l *redislockLock) release(ctx context.Context) error { return l.held.Release(ctx) }

type redsyncLock struct {
	rs  *redsync.Redsync
	key string
	ttl time.Duration
	m   *redsync.Mutex
}

func (l *redsyncLock) obtain(ctx context.Context) (bool, error) {
	l.m = l.rs.NewMutex(l.key, redsync.WithExpiry(l.ttl), redsync.WithTries(1))
	err := l.m.LockContext(ctx)
	var taken *redsync.ErrTaken
	if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
		return false, nil
	}
	return err == nil, err
}

func (l *redsyncLock) wait(ctx context.Context) error {
	l.m = l.rs.NewMutex(l.key, redsync.WithExpiry(l.ttl), redsync.WithTries(1<<30)) // the default retry delay
	return l.m.LockContext(ctx)
}

func (l *redsyncLock) release(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock found the key gone or someone else's")
	}
	return err
}

// foreignChild is the child's main: it reads commands from stdin, one a
// line, and answers on stdout:
//
//	hold     obtain the lock (trying every 1ms until it is free): "held"
//	release  release it: "released <unix ns>", the time right after the
//	         release script's reply, so after the key was deleted
//	hammer   obtain, hold for foreignWork, release, and again at once (a
//	         failed obtain is retried at once too), until "stop":
//	         "hammering" after the first obtain, "stopped <obtains> <misses>"
//	rounds <n> <hold ms> <pause ms>
//	         n times: obtain with the library's own retries (foreignRetry),
//	         hold, release, pause: "took <ns>" (how long the obtain
//	         waited) after each release, "done" at the end
//
// It exits at the end of stdin, also in the middle of a command.
func foreignChild(impl string) int {
	c := goredis.NewClient(&goredis.Options{Addr: os.Getenv("FENCELOCK_FOREIGN_ADDR")})
	defer c.Close()
	lk, err := newForeignLock(c, impl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "foreign child:", err)
		return 2
	}
	// ctx ends with stdin: a child whose parent died (a test that
	// panicked) stops waiting for the lock and exits.
	ctx, eof := context.WithCancel(context.Background())
	defer eof()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "foreign child:", err)
		return 1
	}
	cmds := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
		close(cmds)
		eof()
	}()
	for cmd := range cmds {
		var err error
		switch cmd {
		case "hold":
			err = foreignHold(ctx, lk)
		case "release":
			err = foreignRelease(ctx, lk)
		case "hammer":
			err = foreignHammer(ctx, lk, cmds)
		default:
			err = foreignRounds(ctx, lk, cmd)
		}
		if err != nil {
			return fail(err)
		}
	}
	return 0
}

// newForeignLock is the foreign child's lock over c: of library impl, on
// the key and with the TTL its environment names.
func newForeignLock(c *goredis.Client, impl string) (foreignLock, error) {
	key := os.Getenv("FENCELOCK_FOREIGN_KEY")
	ms, err := strconv.Atoi(os.Getenv("FENCELOCK_FOREIGN_TTL"))
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(ms) * time.Millisecond
	switch impl {
	case "redislock":
		return &redislockLock{c: redislock.New(c), key: key, ttl: ttl}, nil
	case "redsync":
		return &redsyncLock{rs: redsync.New(rsgoredis.NewPool(c)), key: key, ttl: ttl}, nil
	}
	return nil, errors.New("unknown library " + impl)
}

// foreignHold is the child's hold command: obtain, trying every 1ms until
// the lock is free, then "held".
func foreignHold(ctx context.Context, lk foreignLock) error {
	for {
		ok, err := lk.obtain(ctx)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Println("held")
	return nil
}

// foreignRelease is the child's release command: release, then
// "released <unix ns>".
func foreignRelease(ctx context.Context, lk foreignLock) error {
	if err := lk.release(ctx); err != nil {
		return err
	}
	fmt.Println("released", time.Now().UnixNano())
	return nil
}

// foreignHammer is the child's hammer command: obtain, hold for
// foreignWork, release, and again at once, until the next line of cmds
// ("stop") or their end.
func foreignHammer(ctx context.Context, lk foreignLock, cmds <-chan string) error {
	var obtains, misses int
loop:
	for {
		select {
		case <-cmds: // "stop", or the end of stdin
			break loop
		default:
		}
		ok, err := lk.obtain(ctx)
		if err != nil {
			return err
		}
		if !ok {
			misses++
			continue
		}
		if obtains++; obtains == 1 {
			fmt.Println("hammering")
		}
		time.Sleep(foreignWork)
		if err := lk.release(ctx); err != nil {
			return err
		}
	}
	fmt.Println("stopped", obtains, misses)
	return nil
}

// foreignRounds is the child's rounds command, cmd: n rounds of obtain
// with the library's own retries, hold, release, pause.
func foreignRounds(ctx context.Context, lk foreignLock, cmd string) error {
	var n, hold, pause int
	if _, err := fmt.Sscanf(cmd, "rounds %d %d %d", &n, &hold, &pause); err != nil {
		return fmt.Errorf("unknown command %q", cmd)
	}
	for range n {
		start := time.Now()
		if err := lk.wait(ctx); err != nil {
			return err
		}
		took := time.Since(start)
		time.Sleep(time.Duration(hold) * time.Millisecond)
		if err := lk.release(ctx); err != nil {
			return err
		}
		fmt.Println("took", took.Nanoseconds())
		time.Sleep(time.Duration(pause) * time.Millisecond)
	}
	fmt.Println("done")
	return nil
}

// child is a running foreign child process.
type child struct {
	t     *testing.T
	stdin io.WriteCloser
	lines chan string
}

// startChild runs the test binary as a foreign child locking key with impl.
func startChild(t *testing.T, impl, key string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), foreignChildEnv+"="+impl, "FENCELOCK_FOREIGN_ADDR="+srv.Addr(),
		"FENCELOCK_FOREIGN_KEY="+key, "FENCELOCK_FOREIGN_TTL="+strconv.FormatInt(foreignTTL.Milliseconds(), 10))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{t: t, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		_ = stdin.Close() // the child exits at the end of its stdin
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return c
}

func (c *child) send(cmd string) {
	c.t.Helper()
	_, err := io.WriteString(c.stdin, cmd+"\n")
	require.NoError(c.t, err)
}

// expect returns the child's next line, which must start with word, and
// the time it was read.
func (c *child) expect(word string, within time.Duration) (string, time.Time) {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		read := time.Now()
		require.True(c.t, ok, "the foreign child exited while the test waited for %q", word)
		require.True(c.t, strings.HasPrefix(line, word), "the foreign child said %q, not %q", line, word)
		return line, read
	case <-time.After(within):
		require.FailNowf(c.t, "timeout", "the foreign child did not say %q within %v", word, within)
		return "", time.Time{}
	}
}

// timedAcquire is Acquire in the background; the result carries the time
// Acquire returned.
type timedResult struct {
	acquired
	at time.Time
}

func goTimedAcquire(ctx context.Context, l *backend.Locker, name string) <-chan timedResult {
	ch := make(chan timedResult, 1)
	go func() {
		ls, err := l.Acquire(ctx, name)
		ch <- timedResult{acquired{Lease: ls, Err: err}, time.Now()}
	}()
	return ch
}

func waitTimed(t *testing.T, ch <-chan timedResult, d time.Duration) timedResult {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.Err)
		return r
	case <-time.After(d):
		require.FailNowf(t, "timeout", "no Acquire result within %v", d)
		return timedResult{}
	}
}

// waitQueued waits until the lock's queue holds n waiters.
func waitQueued(t *testing.T, l *backend.Locker, name string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := l.Status(tctx(t, 5*time.Second), name)
		return err == nil && len(st.Waiters) == n
	}, 5*time.Second, 2*time.Millisecond, "%d waiters queued", n)
}

// TestForeignReleaseGrantsQueuedWaiter: a redislock or redsync holder in
// another process releases (publishing nothing); the first of two fencelock
// waiters queued behind it is granted within 100ms (it polls, at most 50ms
// apart), and the second after the first's release (FIFO, by the usual
// handoff). The children's locks live 15s, so the fallback timer cannot be
// what grants the lock: without the polling each sample waits ~15s and the
// test fails after 2s.
//
// The latency of a sample runs from the child's clock reading right after
// its release script replied (so after the key was deleted; same host,
// same clock) to the return of the waiter's Acquire. One sample can land
// on a descheduled process of a busy 2-core machine, so the test asserts
// on the median of several (each sample must still come within 2s).
func TestForeignReleaseGrantsQueuedWaiter(t *testing.T) {
	const samples = 7
	for _, impl := range []string{"redislock", "redsync"} {
		t.Run(impl, func(t *testing.T) {
			prefix := testPrefix(t)
			ch := startChild(t, impl, LockKey(prefix, "n"))
			la := locker(t, srv.Addr(), Config{Prefix: prefix})
			lb := locker(t, srv.Addr(), Config{Prefix: prefix})
			ctx := tctx(t, 60*time.Second)
			var lat, latRead []time.Duration
			for i := range samples {
				ch.send("hold")
				ch.expect("held", 10*time.Second)
				a := goTimedAcquire(ctx, la, "n")
				waitQueued(t, la, "n", 1)
				b := goAcquire(ctx, lb, "n")
				waitQueued(t, la, "n", 2)
				// Let the first waiter's polling reach its longest gap
				// (5+10+20+40ms at most), and vary the phase of the release.
				time.Sleep(100*time.Millisecond + time.Duration(i)*7*time.Millisecond)
				ch.send("release")
				line, read := ch.expect("released", 10*time.Second)
				ns, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
				require.NoError(t, err, line)
				ra := waitTimed(t, a, 2*time.Second)
				lat = append(lat, ra.at.Sub(time.Unix(0, ns)))
				latRead = append(latRead, max(0, ra.at.Sub(read)))
				requireBlocked(t, b, 20*time.Millisecond) // FIFO: b waits for a
				release(t, ra.Lease)
				rb := waitAcquired(t, b, 5*time.Second)
				require.NoError(t, rb.Err)
				require.Greater(t, rb.Lease.Token(), ra.Lease.Token())
				release(t, rb.Lease)
			}
			med := median(lat)
			t.Logf("%s release -> grant, %d samples: median %v, max %v (from the child's clock); from reading its line: median %v; all: %v",
				impl, samples, med, slices.Max(lat), median(latRead), lat)
			assert.LessOrEqual(t, med, 100*time.Millisecond, "median grant latency after a foreign release")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestForeignHammerDoesNotStarveWaiter: a redislock or redsync client in
// another process obtains the lock, holds it for 2ms, releases it and
// obtains it again at once (the key is free only between its release and
// its next obtain, a few percent of the time); a fencelock waiter
// still gets the lock within a few seconds, holds it exclusively (the
// hammer's obtains fail meanwhile), and once it released the hammer takes
// the key again; three times. The hammer's locks live 15s: the fallback
// timer alone would try once per 15s and find the key held again.
func TestForeignHammerDoesNotStarveWaiter(t *testing.T) {
	for _, impl := range []string{"redislock", "redsync"} {
		t.Run(impl, func(t *testing.T) {
			prefix := testPrefix(t)
			key := LockKey(prefix, "n")
			ch := startChild(t, impl, key)
			admin := newClient(t, srv.Addr())
			l, d := driverLocker(t, newClient(t, srv.Addr()), Config{Prefix: prefix})
			ctx := tctx(t, 60*time.Second)

			ch.send("hammer")
			ch.expect("hammering", 10*time.Second)
			// Three rounds: a waiter that tries only now and then may land
			// in the free moment by luck once, hardly three times.
			var took []time.Duration
			for range 3 {
				time.Sleep(100 * time.Millisecond)
				start := time.Now()
				r := waitTimed(t, goTimedAcquire(ctx, l, "n"), 5*time.Second)
				took = append(took, r.at.Sub(start))
				// Held: the hammer's obtains fail, the key stays ours.
				v, err := admin.Get(ctx, key).Result()
				require.NoError(t, err)
				require.True(t, strings.HasSuffix(v, ":"+r.Lease.Token().String()), "lock key holds %q while we hold token %v", v, r.Lease.Token())
				time.Sleep(50 * time.Millisecond)
				v2, err := admin.Get(ctx, key).Result()
				require.NoError(t, err)
				require.Equal(t, v, v2, "the hammer took the key while we held it")
				release(t, r.Lease)
				// Not starved either: the hammer takes the key again.
				require.Eventually(t, func() bool {
					v, err := admin.Get(ctx, key).Result()
					return err == nil && !strings.HasSuffix(v, ":"+r.Lease.Token().String())
				}, 5*time.Second, time.Millisecond, "the hammer obtains the key again after our release")
			}
			ch.send("stop")
			line, _ := ch.expect("stopped", 10*time.Second)
			t.Logf("%s hammer: waiter granted after %v, %d acquire scripts in all; child: %s", impl, took, d.attempts.Load(), line)
		})
	}
}

// TestNoPollBehindFencelockHolder: a waiter behind a holder of ours does
// not poll: it queues (one script before it subscribes, one after) and is
// granted by the release's message, with no further attempt.
func TestNoPollBehindFencelockHolder(t *testing.T) {
	prefix := testPrefix(t)
	la := locker(t, srv.Addr(), Config{Prefix: prefix})
	lb, db := driverLocker(t, newClient(t, srv.Addr()), Config{Prefix: prefix})
	ctx := tctx(t, 20*time.Second)
	ls, err := la.TryAcquire(ctx, "n")
	require.NoError(t, err)
	ch := goAcquire(ctx, lb, "n")
	requireBlocked(t, ch, 300*time.Millisecond)
	release(t, ls)
	r := waitAcquired(t, ch, 5*time.Second)
	require.NoError(t, r.Err)
	require.Equal(t, int64(2), db.attempts.Load(), "acquire scripts of a waiter behind one of ours")
	require.Equal(t, int64(1), db.wakeups.Load())
	release(t, r.Lease)
}
