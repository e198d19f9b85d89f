package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/fencing"
)

// Status is what a backend can tell about one lock.
type Status struct {
	Name    string  // the lock's name, as given to Locker.Status
	Holder  *Entry  // nil if the lock is free
	Waiters []Entry // in the order they will be granted, where the backend queues them
}

// Entry is one acquisition holding or waiting for a lock.
type Entry struct {
	// ID is the backend's own name for the acquisition, stable from the
	// moment it queues until it ends, and never another acquisition's: etcd:
	// its lock key and the key's create revision, "<key>@<revision>" (a
	// Locker reuses its leases, so one key may stand for several
	// acquisitions in turn); ZooKeeper: its lock node's name; Redis: its
	// owner id (for a key written by another library, the key's value); mem:
	// its lease number. Pass it to Locker.RevokeID. Set for holders and
	// waiters alike, where the token of a waiter may be unknown.
	ID       string
	Holder   string            // the holder identity given with WithHolder
	Metadata map[string]string // given with WithMetadata
	Token    fencing.Token     // the token it holds, or will hold when granted (zero if unknown)
	TTLLeft  time.Duration     // time until the server expires it if not renewed; negative if unknown
	// Value is the value stored with WithValue (an election candidate's),
	// as the last Proclaim left it; "" for a lock acquisition. On etcd and
	// ZooKeeper it is the raw data of the acquisition's key or node: for a
	// lock acquisition fencelock's JSON record of holder and metadata, and
	// for another library's entry what it wrote (a concurrency.Election
	// candidate's value, a Curator participant id).
	Value string
}

// Status reports who holds and who waits for the lock called name. It
// returns an error matching errors.ErrUnsupported if the backend cannot tell,
// one matching ErrClosed once the Locker is closed, and one matching
// ErrUnavailable if the backend did not answer: it could not be reached,
// or ctx ended first (the error then matches ctx.Err() too).
func (l *Locker) Status(ctx context.Context, name string) (Status, error) {
	if err := ValidateName(name); err != nil {
		return Status{}, err
	}
	if l.isClosed() {
		return Status{}, fmt.Errorf("fencelock: status %q: %w", name, ErrClosed)
	}
	st, err := l.drv.Inspect(ctx, name)
	if err = unanswered(ctx, err); err != nil {
		return Status{}, fmt.Errorf("fencelock: status %q: %w", name, err)
	}
	out := Status{Name: name}
	if st.Holder != nil {
		h := Entry(*st.Holder)
		out.Holder = &h
	}
	if len(st.Waiters) > 0 {
		out.Waiters = make([]Entry, len(st.Waiters))
		for i, w := range st.Waiters {
			out.Waiters[i] = Entry(w)
		}
	}
	return out, nil
}

// Revoke ends the acquisition of lock name that holds or waits with token,
// on the server, as if its lease had expired: its holder's loss signal fires
// and the next waiter is granted the lock. found is false if no acquisition
// has that token. It returns an error matching errors.ErrUnsupported if the
// backend cannot do it, one matching ErrClosed once the Locker is closed,
// and one matching ErrUnavailable (and ctx.Err(), if ctx ended) if the
// backend did not answer: whether it revoked is then unknown. A waiter
// whose token is not known before its grant (Redis) has no token to name:
// use RevokeID.
func (l *Locker) Revoke(ctx context.Context, name string, token fencing.Token) (found bool, err error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	if l.isClosed() {
		return false, fmt.Errorf("fencelock: revoke %q token %d: %w", name, token, ErrClosed)
	}
	found, err = l.drv.Revoke(ctx, name, token)
	if err = unanswered(ctx, err); err != nil {
		return false, fmt.Errorf("fencelock: revoke %q token %d: %w", name, token, err)
	}
	return found, nil
}

// RevokeID ends the acquisition of lock name whose Entry.ID (as Status
// shows it) is id, on the server, as if its lease had expired: a revoked
// holder's loss signal fires and the next waiter is granted the lock; a
// revoked waiter's Acquire fails with an error matching ErrLeaseLost and the
// others keep their places. Unlike Revoke it reaches waiters whose token is
// not known before their grant (Redis). found is false if no acquisition of
// name has that id (it ended already). An empty id, or one that cannot be
// the backend's, returns an error matching ErrInvalidOption; a backend that
// cannot do it, one matching errors.ErrUnsupported; otherwise as Revoke.
func (l *Locker) RevokeID(ctx context.Context, name, id string) (found bool, err error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	if id == "" {
		return false, fmt.Errorf("fencelock: revoke %q: %w: empty acquisition id", name, ErrInvalidOption)
	}
	if l.isClosed() {
		return false, fmt.Errorf("fencelock: revoke %q id %q: %w", name, id, ErrClosed)
	}
	found, err = l.drv.RevokeID(ctx, name, id)
	if err = unanswered(ctx, err); err != nil {
		return false, fmt.Errorf("fencelock: revoke %q id %q: %w", name, id, err)
	}
	return found, nil
}

// isClosed reports whether Close or Shutdown has started.
func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
