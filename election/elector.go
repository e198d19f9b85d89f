package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

// ErrNoLeader is returned by Leader when nobody leads: the backend
// answered, and no candidate holds the name.
var ErrNoLeader = errors.New("fencelock: no leader")

// DefaultPollInterval is how often Observe reads the leader when
// WithPollInterval is not given.
const DefaultPollInterval = 100 * time.Millisecond

// Elector runs elections over one Locker: its backend, its TTL and its
// other defaults are the campaigns'. It is safe for concurrent use.
type Elector struct {
	locker *backend.Locker
	poll   time.Duration
}

// Option configures an Elector.
type Option func(*Elector)

// WithPollInterval sets how often Observe reads the leader from the
// backend. Default DefaultPollInterval (100ms); a change is seen within
// one interval (plus the read's round trip). It must be positive.
func WithPollInterval(d time.Duration) Option { return func(e *Elector) { e.poll = d } }

// New returns an Elector over locker. It fails with an error matching
// backend.ErrInvalidOption if an option is out of range.
func New(locker *backend.Locker, opts ...Option) (*Elector, error) {
	if locker == nil {
		return nil, fmt.Errorf("%w: election: nil Locker", backend.ErrInvalidOption)
	}
	e := &Elector{locker: locker, poll: DefaultPollInterval}
	for _, o := range opts {
		if o != nil {
			o(e)
		}
	}
	if e.poll <= 0 {
		return nil, fmt.Errorf("%w: election: poll interval must be positive, got %v", backend.ErrInvalidOption, e.poll)
	}
	return e, nil
}

// Campaign blocks until this candidate leads the election called name, or
// ctx ends, and returns its term. value is stored with the lock for
// observers (see backend.WithValue for what it may hold); opts are the
// acquisition's options (WithTTL, WithMaxHold, ...). Candidates are
// granted terms in the order they campaigned where the backend queues.
// Errors are Locker.Acquire's: a Campaign given up (ctx ended) matches
// backend.ErrNotAcquired, or backend.ErrUnavailable if the backend did not
// answer, and leaves nothing behind in the backend.
func (e *Elector) Campaign(ctx context.Context, name, value string, opts ...backend.Option) (*Term, error) {
	all := make([]backend.Option, 0, len(opts)+1)
	all = append(all, opts...)
	all = append(all, backend.WithValue(value))
	lease, err := e.locker.Acquire(ctx, name, all...)
	if err != nil {
		return nil, fmt.Errorf("fencelock: campaign: %w", err)
	}
	return &Term{lease: lease}, nil
}

// Leader returns who leads the election called name now. It returns an
// error matching ErrNoLeader if nobody does, and one matching
// backend.ErrUnavailable if the backend could not be reached: then who
// leads is unknown.
func (e *Elector) Leader(ctx context.Context, name string) (Leader, error) {
	st, err := e.locker.Status(ctx, name)
	if err != nil {
		return Leader{}, fmt.Errorf("fencelock: leader: %w", err)
	}
	if st.Holder == nil {
		return Leader{}, fmt.Errorf("fencelock: leader of %q: %w", name, ErrNoLeader)
	}
	return leaderOf(name, st.Holder), nil
}

// Leader is the candidate that leads an election.
type Leader struct {
	Name  string        // the election's name
	Token fencing.Token // the term number: the fencing token of its grant (zero for a leader elected by another library that issues none)
	Value string        // its value, as its last Proclaim left it
	ID    string        // the backend's id of its acquisition (backend.Entry.ID)
}

func leaderOf(name string, h *backend.Entry) Leader {
	return Leader{Name: name, Token: h.Token, Value: h.Value, ID: h.ID}
}
