package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
)

// errFirstAttemptUnanswered fails the renewals of an acquisition whose
// first attempt has had no answer yet: nothing of it is known to be in
// Redis, so nothing can be renewed.
var errFirstAttemptUnanswered = fmt.Errorf("%w: redis: the acquisition's first attempt is not answered yet", backend.ErrUnavailable)

// mapErr wraps a go-redis error in backend.ErrClientClosed when the client
// was closed (go-redis's ErrClosed), in backend.ErrUnavailable when it says the
// server could not be reached or did not answer (a network error or
// timeout, a closed or reset connection, an exhausted pool, a server that
// is loading, has no primary or is failing over), or in
// backend.ErrPermission when the server refused it for lack of
// permission (NOPERM, or a script refused a command it calls). A Redis
// Cluster's answers while a slot moves (MOVED, ASK, TRYAGAIN, a script's
// "non local key") are ErrUnavailable too. The go-redis error stays in
// the chain. Other errors (a script's reply) are returned as they are.
func mapErr(err error) error {
	if err == nil || errors.Is(err, backend.ErrUnavailable) || errors.Is(err, backend.ErrPermission) {
		return err
	}
	var ne net.Error
	switch {
	case errors.Is(err, goredis.ErrClosed):
		// The caller's client was closed under the Locker (a client the
		// adapter opened is closed only once the Locker is).
		return fmt.Errorf("%w: %w", backend.ErrClientClosed, err)
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, goredis.ErrPoolTimeout), errors.Is(err, goredis.ErrPoolExhausted),
		errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	// The server cannot take the request now: loading its data, no
	// primary, a busy script, out of memory (maxmemory), a Redis Cluster
	// whose slot moved or is moving (MOVED, ASK: the cluster client
	// follows them, but a request sent to one node, as a grant that waits
	// for replicas is, meets them during a failover or a slot migration).
	// (Out of client slots, it closes the connection: a network error
	// above.)
	for _, p := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "BUSY ", "OOM", "MOVED ", "ASK "} {
		if goredis.HasErrorPrefix(err, p) {
			return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
		}
	}
	for _, p := range []string{"NOAUTH", "WRONGPASS", "NOPERM"} {
		if goredis.HasErrorPrefix(err, p) {
			return fmt.Errorf("%w: %w", backend.ErrPermission, err)
		}
	}
	var re goredis.Error
	switch {
	case !errors.As(err, &re):
	case nonLocalKey(err):
		// A script stopped by a command whose key the node does not
		// serve (it moved away during a migration: see migrating).
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	case strings.Contains(re.Error(), "The user executing the script can't"):
		// A command a script calls without the permission fails the
		// script with "ERR The user executing the script can't run
		// this command or subcommand" (or "can't publish to the
		// channel", "can't access at least one of the keys"; Redis
		// 7.0).
		return fmt.Errorf("%w: %w", backend.ErrPermission, err)
	}
	return err
}

// heedsContext reports whether client bounds its requests by their
// context's deadline (ContextTimeoutEnabled). A client that does not waits
// out its read timeout on a server it cannot reach, whatever the context:
// the driver then bounds its calls itself (see bounded). A client of
// another type is assumed not to.
func heedsContext(client Client) bool {
	switch c := client.(type) {
	case *goredis.Client:
		return c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// unbounded reports whether a call under ctx needs no bounding (see
// bounded): the client heeds contexts, or ctx never ends. Hot paths check
// it before they make the closure bounded takes.
func (d *redisDriver) unbounded(ctx context.Context) bool {
	return d.heedsCtx || ctx.Done() == nil
}

// bounded runs f, a go-redis call under ctx, and returns its result, or
// ctx's error as soon as ctx ends if the client does not heed contexts (see
// heedsContext): f then goes on in the background until the client's own
// timeouts end it, and its result is dropped. Whether a request abandoned
// so reached the server is unknown, as for one whose context ended.
func bounded[T any](ctx context.Context, d *redisDriver, f func() (T, error)) (T, error) {
	if d.unbounded(ctx) {
		return f()
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("redis: no reply before the context ended (the client has ContextTimeoutEnabled off): %w", ctx.Err())
	}
}
