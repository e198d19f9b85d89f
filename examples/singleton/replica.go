package main

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/fencing"
)

// electionName is what the replicas campaign for.
const electionName = "singleton"

// replica is one copy of the service, as if in a process of its own: its
// own Locker (its own connection to the backend) and Elector. It campaigns,
// works while it leads, and campaigns again when its term ends.
type replica struct {
	name    string
	elector *election.Elector
	journal *journal
	ttl     time.Duration
	say     func(who, format string, args ...any)

	resigns chan chan fencing.Token // a request to resign the term it leads; the term is sent back
	pauses  chan *pause             // a request to stall before its next write
}

// pause stalls a leader between its last check that it leads and its next
// write, as a GC pause or SIGSTOP can: the leader sends its term on paused,
// writes once resume is closed, and sends what the write returned on late.
type pause struct {
	paused chan fencing.Token
	resume chan struct{}
	late   chan error
}

// run campaigns and leads until ctx ends.
func (r *replica) run(ctx context.Context) {
	for ctx.Err() == nil {
		// Renewals are the work loop's (Refresh below), not a goroutine's:
		// a replica that stops making progress stops renewing its term, as
		// a paused process would, and loses it after the TTL. A waiting
		// candidate keeps its place in the queue all the same.
		term, err := r.elector.Campaign(ctx, electionName, r.name,
			backend.WithTTL(r.ttl), backend.WithAutoRenew(false))
		if err != nil {
			if ctx.Err() == nil {
				r.say(r.name, "campaign failed, again in %v: %v", r.ttl/4, err)
				sleep(ctx, r.ttl/4)
			}
			continue
		}
		r.say(r.name, "LEADS: term %s", term.Token())
		r.lead(ctx, term)
	}
}

// lead appends an entry every TTL/4 while term lasts, renewing it first,
// and returns when the term ends (lost, resigned, or ctx ended).
func (r *replica) lead(ctx context.Context, term *election.Term) {
	defer term.Resign(context.WithoutCancel(ctx)) // idempotent
	tick := time.NewTicker(r.ttl / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			r.say(r.name, "shuts down, resigns term %s", term.Token())
			return
		case reply := <-r.resigns:
			r.say(r.name, "resigns term %s; campaigns again", term.Token())
			if err := term.Resign(context.WithoutCancel(ctx)); err != nil {
				r.say(r.name, "resign: %v", err)
			}
			reply <- term.Token()
			return
		case <-term.Done():
			r.say(r.name, "lost term %s: %v; campaigns again", term.Token(), term.Err())
			return
		case <-tick.C:
		}
		if err := term.Lease().Refresh(ctx); err != nil {
			// Lost: Done fires. Unreachable: the term lasts until its
			// deadline, and the next tick tries again.
			continue
		}
		var p *pause
		select {
		case p = <-r.pauses:
			r.say(r.name, "PAUSES (GC, SIGSTOP) after checking its term %s, before its write", term.Token())
			p.paused <- term.Token()
			select {
			case <-p.resume:
			case <-ctx.Done():
			}
			r.say(r.name, "wakes up, still believes it leads, writes under term %s", term.Token())
		default:
		}
		// The write's context is the replica's, not term.Context(): the
		// token alone decides whether it lands, as for a write already on
		// its way when the term ended.
		e, err := r.journal.append(ctx, r.name, term.Token())
		if p != nil {
			p.late <- err
		}
		if err != nil {
			r.say(r.name, "write REJECTED: %v; campaigns again", err)
			return
		}
		if p == nil {
			r.say(r.name, "   wrote entry %d under term %s", e.Seq, e.Token)
		}
	}
}

// stall asks r to pause before its next write while it leads, and returns
// once it has paused, with the term it paused in.
func (r *replica) stall(ctx context.Context) (*pause, fencing.Token, error) {
	p := &pause{paused: make(chan fencing.Token, 1), resume: make(chan struct{}), late: make(chan error, 1)}
	select {
	case r.pauses <- p:
		return p, <-p.paused, nil
	case <-ctx.Done():
		return nil, 0, context.Cause(ctx)
	}
}

// resign asks r to resign the term it leads (if it is not leading, once it
// leads), and returns that term.
func (r *replica) resign(ctx context.Context) (fencing.Token, error) {
	reply := make(chan fencing.Token, 1)
	select {
	case r.resigns <- reply:
		return <-reply, nil
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
