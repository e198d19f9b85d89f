package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

// Observation is one state of an election as Observe saw it: who leads,
// nobody, or unknown.
type Observation struct {
	// Leader is who leads; nil if nobody does, or if Err is set.
	Leader *Leader
	// Err is set if the backend could not be read (it matches
	// backend.ErrUnavailable when unreachable): who leads is unknown.
	Err error
}

// Observe follows the election called name until ctx ends or the Locker
// is closed (after an Observation whose Err matches backend.ErrClosed),
// and then closes the channel it returns. It reads the leader every poll interval (see
// WithPollInterval) and delivers an Observation each time what it sees
// changes: a new leader, the same leader with a new value (Proclaim),
// nobody leading, or the backend unreachable (Err set), and then the state
// once it is reachable again. A read is given up, and the election
// reported unknown, after 5s, and while a leader is delivered once that
// leader's lease could have ended (when the read that last showed it was
// sent, plus the TTL it had left then; on etcd, Redis and PostgreSQL,
// whose Status says it; ZooKeeper's cannot): an observer cut off from the
// backend does not go on naming a leader for longer than its term could
// last. It never
// delivers a term older than one it
// delivered before, nor a term again once it saw it end: a read that shows
// one (a lagging replica, a slow answer) is skipped. A leader elected by
// another library, with token zero, is delivered whenever it changes. A term shorter than the poll interval may be
// missed. Each observation is the state when it was read: a consumer that
// reads the channel late gets it late, never out of order. A bad name
// fails at once.
func (e *Elector) Observe(ctx context.Context, name string) (<-chan Observation, error) {
	if err := backend.ValidateName(name); err != nil {
		return nil, fmt.Errorf("fencelock: observe: %w", err)
	}
	ch := make(chan Observation)
	go e.observe(ctx, name, ch)
	return ch, nil
}

// observer is what observe delivered last.
type observer struct {
	delivered bool          // anything yet
	unknown   bool          // the last delivery was an error
	leading   bool          // the last delivery was a leader
	leader    Leader        // the last leader delivered, while leading is true
	newest    fencing.Token // the largest term number delivered
	ended     bool          // the newest term was seen to end (no leader, or another leader)
	// mayEnd is when the leader delivered could have ended without a
	// renewal, as the last read that showed it said (sent + its TTL
	// left); zero if unknown or nobody leads. A read still unanswered
	// then is reported unknown: the observer does not go on naming a
	// leader whose term may be over.
	mayEnd time.Time
}

// bound is how long a read may take: readTimeout, and while a leader is
// delivered no later than its mayEnd, but at least minReadBound.
func (o *observer) bound() time.Duration {
	if !o.leading || o.unknown || o.mayEnd.IsZero() {
		return readTimeout
	}
	return max(min(readTimeout, time.Until(o.mayEnd)), minReadBound)
}

// minReadBound is the least a read is given while a leader is shown:
// etcd counts a lease's TTL left in whole seconds, rounded down, so a
// leader renewing a 2s lease may read as 0s left; a read bounded by that
// alone failed at once, and the observer flapped between the leader and
// unknown on a healthy backend.
const minReadBound = time.Second

// read records, after a read sent at sent that showed st, until when the
// leader it shows may lead.
func (o *observer) read(sent time.Time, st backend.Status) {
	o.mayEnd = time.Time{}
	if h := st.Holder; h != nil && h.TTLLeft >= 0 {
		o.mayEnd = sent.Add(h.TTLLeft)
	}
}

// next returns what to deliver for a read of the election, and whether to
// deliver it.
func (o *observer) next(name string, st backend.Status, err error) (Observation, bool) {
	if err != nil {
		if o.delivered && o.unknown {
			return Observation{}, false
		}
		o.delivered, o.unknown = true, true
		return Observation{Err: err}, true
	}
	if st.Holder == nil {
		if o.delivered && !o.unknown && !o.leading {
			return Observation{}, false
		}
		o.delivered, o.unknown, o.leading, o.ended = true, false, false, true
		return Observation{}, true
	}
	l := leaderOf(name, st.Holder)
	if o.stale(l) {
		return Observation{}, false
	}
	if o.delivered && !o.unknown && o.leading && l == o.leader {
		return Observation{}, false
	}
	o.delivered, o.unknown, o.leading, o.leader = true, false, true, l
	switch {
	case l.Token > o.newest:
		o.newest, o.ended = l.Token, false
	case l.Token != o.newest:
		o.ended = true // another library's leader, with no token
	}
	return Observation{Leader: &l}, true
}

// stale reports whether l is a term that ended before what was delivered:
// older than the newest term delivered, or that term itself again once it
// was seen to end (a lagging read after "no leader" or a newer term). A
// leader with token zero (another library's, which issues none) has no
// place in the order, and is never stale.
func (o *observer) stale(l Leader) bool {
	if l.Token == 0 || o.newest == 0 {
		return false
	}
	return l.Token < o.newest || l.Token == o.newest && o.ended
}

func (e *Elector) observe(ctx context.Context, name string, ch chan<- Observation) {
	defer close(ch)
	var o observer
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		sent := time.Now()
		st, err := e.read(ctx, name, o.bound())
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			o.read(sent, st)
		}
		if obs, ok := o.next(name, st, err); ok {
			select {
			case ch <- obs:
			case <-ctx.Done():
				return
			}
		}
		if errors.Is(err, backend.ErrClosed) {
			return
		}
		t.Reset(e.poll)
	}
}

// readTimeout bounds one read of the leader: a backend that does not
// answer within it (or, while a leader is delivered, by the end of that
// leader's lease as last read) is reported unknown, and read again.
const readTimeout = 5 * time.Second

func (e *Elector) read(ctx context.Context, name string, bound time.Duration) (backend.Status, error) {
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	st, err := e.locker.Status(rctx, name)
	if err != nil && ctx.Err() == nil && rctx.Err() != nil && !errors.Is(err, backend.ErrUnavailable) {
		err = fmt.Errorf("%w: no answer within %v: %w", backend.ErrUnavailable, bound.Round(time.Millisecond), err)
	}
	return st, err
}
