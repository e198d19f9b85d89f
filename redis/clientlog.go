package redis

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// go-redis (v9) has no per-client logger: every client logs through one
// process-wide logger (goredis.SetLogger), by default to os.Stderr with the
// prefix "redis: " (a connection pool that cannot dial, among others). A
// client this package opens itself (backend.Open with a redis or rediss
// URL) must not write there, and the application's own clients must keep
// whatever go-redis does for them. So the package installs, once, when it
// is initialised, a logger that behaves as go-redis's default (same
// prefix, flags, file and line, on os.Stderr) for every line, except the
// lines of the clients it opened: those go to their clientLog (nowhere, by
// default). An application that calls goredis.SetLogger (or
// logging.Disable, logging.Enable) replaces it, as it would replace
// go-redis's default: every client's lines, this package's too, then go
// where the application says.
//
// A line is told to be an owned client's by its context (a command's, or
// the pub/sub connection's: the owned client's hook and the hub mark
// theirs) or, for a failed dial (which go-redis logs from a goroutine of
// its own, with a context of its own), by the dial error itself, which
// the owned client's dialer registered in ownedDials.
func init() {
	goredis.SetLogger(clientLogger{stderr: log.New(os.Stderr, "redis: ", log.LstdFlags|log.Lshortfile)})
}

// clientLog is where the log lines of one client that this package opened
// go: l, at debug level with the attribute client=go-redis, or nowhere if
// l is nil. The Locker reports what they mean (an unreachable server) as
// its errors and in its own logs.
type clientLog struct{ l *slog.Logger }

func (c *clientLog) printf(ctx context.Context, format string, args ...any) {
	if c.l == nil || !c.l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	c.l.DebugContext(ctx, fmt.Sprintf(format, args...), slog.String("client", "go-redis"))
}

type clientLogKey struct{}

// withClientLog marks ctx as a request of the client whose lines go to to.
func withClientLog(ctx context.Context, to *clientLog) context.Context {
	return context.WithValue(ctx, clientLogKey{}, to)
}

// clientLogger is the go-redis logger this package installs.
type clientLogger struct{ stderr *log.Logger }

// Printf implements go-redis's logger interface.
func (c clientLogger) Printf(ctx context.Context, format string, args ...any) {
	if ctx != nil {
		if to, ok := ctx.Value(clientLogKey{}).(*clientLog); ok {
			to.printf(ctx, format, args...)
			return
		}
	}
	if to := ownedSentinels.find(format, args); to != nil {
		to.printf(ctx, format, args...)
		return
	}
	for _, a := range args {
		if err, ok := a.(error); ok {
			if to := ownedDials.find(err); to != nil {
				to.printf(ctx, format, args...)
				return
			}
		}
	}
	// As go-redis's default logger: the file and line are the go-redis
	// call's, two frames up (go-redis's forwarding Printf, then this one).
	_ = c.stderr.Output(3, fmt.Sprintf(format, args...))
}

// ownedDials holds the last dial errors of the clients this package
// opened, by identity, with where their lines go. go-redis logs the last
// error of a dial that failed ("connection pool: failed to dial after N
// attempts: ERR") as its dialer returned it; a few are enough, as the line
// follows the failure at once.
var ownedDials dialErrors

type dialErrors struct {
	mu   sync.Mutex
	errs [16]error
	to   [16]*clientLog
	next int
}

func (d *dialErrors) add(err error, to *clientLog) {
	if err == nil || !reflect.TypeOf(err).Comparable() {
		return
	}
	d.mu.Lock()
	d.errs[d.next], d.to[d.next] = err, to
	d.next = (d.next + 1) % len(d.errs)
	d.mu.Unlock()
}

func (d *dialErrors) find(err error) *clientLog {
	if !reflect.TypeOf(err).Comparable() {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, e := range d.errs {
		if e != nil && e == err {
			return d.to[i]
		}
	}
	return nil
}

// logHook marks every command of a client this package opened, so that
// what go-redis logs while running it goes to the client's clientLog.
type logHook struct{ to *clientLog }

// DialHook implements goredis.Hook: the dialer registers its failures.
func (h logHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (h logHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		return next(withClientLog(ctx, h.to), cmd)
	}
}

// ProcessPipelineHook implements goredis.Hook.
func (h logHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		return next(withClientLog(ctx, h.to), cmds)
	}
}

// ownedSentinels routes the lines of the Sentinel clients this package
// opened. go-redis logs what a Sentinel client does (the primary it
// selected, a switch of primary, a Sentinel that failed) with the context
// of a dial, which its pool runs on a context of its own, or of its
// pub/sub listener: not one a hook marked. Those lines start with
// "sentinel:" and name the master (or the Sentinel's address), so a line
// that names the master name or a Sentinel address of an owned client goes
// to that client's clientLog (the latest opened, if several), and nowhere
// once they all closed. An application's own Sentinel client of the same
// deployment, in the same process, has its Sentinel lines routed there
// too.
var ownedSentinels sentinelLogs

type sentinelLogs struct {
	mu sync.Mutex
	// to holds, by master name and Sentinel address, the owned
	// clients' logs, the latest last. A key whose clients all closed
	// keeps an empty one: a closed client's goroutines may still log
	// (an EOF from a Sentinel it closed), and such lines go nowhere.
	to map[string][]*clientLog
}

// add routes the lines that name any of keys to to, until the returned
// function is called.
func (s *sentinelLogs) add(to *clientLog, keys ...string) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.to == nil {
		s.to = make(map[string][]*clientLog)
	}
	for _, k := range keys {
		s.to[k] = append(s.to[k], to)
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, k := range keys {
			s.to[k] = slices.DeleteFunc(s.to[k], func(c *clientLog) bool { return c == to })
		}
	}
}

// find returns where a line of format with args goes, or nil.
func (s *sentinelLogs) find(format string, args []any) *clientLog {
	if !strings.HasPrefix(format, "sentinel:") {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range args {
		if k, ok := a.(string); ok {
			if logs, known := s.to[k]; known {
				if len(logs) == 0 {
					return &clientLog{} // its clients closed: nowhere
				}
				return logs[len(logs)-1]
			}
		}
	}
	return nil
}
