// Package demo plays the stale-holder timeline that fencing tokens exist for:
// A acquires, pauses past its TTL, loses the lock to B, wakes up and writes
// with its old token, and the resource rejects the write.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

// timerLag is how late the loss signal, a timer, may fire after the local
// deadline on a busy machine.
const timerLag = time.Second

// Client is one participant: a Locker with its own connection to the backend.
type Client struct {
	// Locker is the participant's Locker.
	Locker *backend.Locker
	// Freeze cuts the client off the backend as a stopped process would be
	// (no renewals, no release). Nil: A's renewals are turned off instead.
	Freeze func()
}

// Result is what the timeline produced.
type Result struct {
	TokenA, TokenB fencing.Token // the tokens A and B were granted
	StaleRejected  bool          // A's write after the pause was rejected as stale
	Final          string        // the resource's content at the end
}

// resource is the protected data: a document behind a fencing guard.
type resource struct {
	guard   *fencing.Memory
	content string
}

func (r *resource) write(ctx context.Context, token fencing.Token, content string) error {
	return r.guard.Do(ctx, "document", token, func(context.Context) error {
		r.content = content
		return nil
	})
}

// Run plays the timeline on lock name with lease TTL ttl, printing each step
// to w. It returns an error if a step fails; StaleRejected tells whether
// fencing worked.
func Run(ctx context.Context, w io.Writer, a, b Client, name string, ttl time.Duration) (Result, error) {
	var res Result
	start := time.Now()
	say := func(who, format string, args ...any) {
		fmt.Fprintf(w, "%+8.3fs  %-8s %s\n", time.Since(start).Seconds(), who, fmt.Sprintf(format, args...))
	}
	doc := &resource{guard: fencing.NewMemory()}

	var opts []backend.Option
	if a.Freeze == nil {
		opts = append(opts, backend.WithAutoRenew(false))
	}
	leaseA, err := a.Locker.Acquire(ctx, name, append(opts, backend.WithTTL(ttl))...)
	if err != nil {
		return res, fmt.Errorf("acquire by A: %w", err)
	}
	res.TokenA = leaseA.Token()
	say("A", "acquires %q: token %s, TTL %v", name, leaseA.Token(), ttl)
	if err := doc.write(ctx, leaseA.Token(), "draft by A"); err != nil {
		return res, fmt.Errorf("first write by A: %w", err)
	}
	say("resource", "accepts A's write (token %s)", leaseA.Token())

	if a.Freeze != nil {
		a.Freeze()
		say("A", "pauses (a GC pause, SIGSTOP): its connection goes silent, no renewals")
	} else {
		say("A", "pauses (a GC pause, SIGSTOP): no renewals")
	}
	say("B", "waits for %q", name)
	type grant struct {
		lease *backend.Lease
		err   error
		at    time.Time // when Acquire returned: the grant came no later
	}
	granted := make(chan grant, 1)
	go func() {
		l, err := b.Locker.Acquire(ctx, name, backend.WithTTL(ttl))
		granted <- grant{l, err, time.Now()}
	}()
	var g grant
	select {
	case <-leaseA.Done():
		say("A", "local deadline passed: %v (a paused A cannot see this)", leaseA.Err())
		g = <-granted
	case g = <-granted:
		if g.err != nil {
			break
		}
		// B's grant came first: safe only if A's deadline had passed by
		// then, its loss signal a timer the scheduler has yet to run
		// (a busy machine runs it up to timerLag late).
		if g.at.Before(leaseA.Deadline()) {
			defer g.lease.Release(context.WithoutCancel(ctx))
			return res, fmt.Errorf("granted %q to B %v before A's local deadline", name, leaseA.Deadline().Sub(g.at))
		}
		select {
		case <-leaseA.Done():
			say("A", "local deadline passed: %v (a paused A cannot see this)", leaseA.Err())
		case <-time.After(timerLag):
			defer g.lease.Release(context.WithoutCancel(ctx))
			return res, fmt.Errorf("the loss signal of A did not fire within %v of its local deadline", timerLag)
		}
	}
	leaseB, err := g.lease, g.err
	if err != nil {
		return res, fmt.Errorf("acquire by B: %w", err)
	}
	defer leaseB.Release(context.WithoutCancel(ctx))
	res.TokenB = leaseB.Token()
	say("B", "acquires %q after A's lease expired: token %s", name, leaseB.Token())
	if err := doc.write(ctx, leaseB.Token(), "report by B"); err != nil {
		return res, fmt.Errorf("write by B: %w", err)
	}
	say("resource", "accepts B's write (token %s)", leaseB.Token())

	say("A", "wakes up, still believes it holds %q, writes with token %s", name, leaseA.Token())
	err = doc.write(ctx, leaseA.Token(), "overwrite by A")
	var stale *fencing.StaleTokenError
	switch {
	case errors.As(err, &stale):
		res.StaleRejected = true
		say("resource", "rejects A's write: token %s is lower than %s", stale.Token, stale.Highest)
	case err != nil:
		return res, fmt.Errorf("stale write by A: %w", err)
	default:
		say("resource", "ACCEPTS A's stale write: fencing failed")
	}
	res.Final = doc.content
	say("resource", "holds %q", doc.content)
	return res, nil
}
