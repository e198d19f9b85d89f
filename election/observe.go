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
// once it is reachable again. It never delivers a term older than one it
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
		st, err := e.read(ctx, name)
		if ctx.Err() != nil {
			return
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
// answer within it is reported unknown, and read again.
const readTimeout = 5 * time.Second

func (e *Elector) read(ctx context.Context, name string) (backend.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	return e.locker.Status(ctx, name)
}
