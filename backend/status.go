package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/fencing"
)

// Inspector is implemented by a Driver that can tell who holds and who waits
// for a lock, for status tools.
type Inspector interface {
	Inspect(ctx context.Context, name string) (Status, error)
}

// Status is what a backend can tell about one lock.
type Status struct {
	Name    string
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
}

// Queued returns the Status of a lock whose acquisitions are entries in the
// order of grants: the first holds, the others wait. No entries is a free
// lock.
func Queued(entries []Entry) Status {
	var st Status
	if len(entries) > 0 {
		st.Holder = &entries[0]
	}
	if len(entries) > 1 {
		st.Waiters = entries[1:]
	}
	return st
}

// Status reports who holds and who waits for the lock called name. It
// returns an error matching errors.ErrUnsupported if the backend cannot tell.
func (l *Locker) Status(ctx context.Context, name string) (Status, error) {
	if err := ValidateName(name); err != nil {
		return Status{}, err
	}
	in, ok := l.drv.(Inspector)
	if !ok {
		return Status{}, fmt.Errorf("fencelock: status %q: %w by this backend", name, errors.ErrUnsupported)
	}
	st, err := in.Inspect(ctx, name)
	if err != nil {
		return Status{}, fmt.Errorf("fencelock: status %q: %w", name, err)
	}
	st.Name = name
	return st, nil
}

// Revoker is implemented by a Driver that can end an acquisition on the
// server, for operators breaking a stuck lock and for test harnesses.
type Revoker interface {
	// Revoke ends the acquisition of lock name granted (or queued) with
	// token, as an expiry would; found is false if there was none.
	Revoke(ctx context.Context, name string, token fencing.Token) (found bool, err error)
}

// Revoke ends the acquisition of lock name that holds or waits with token,
// on the server, as if its lease had expired: its holder's loss signal fires
// and the next waiter is granted the lock. found is false if no acquisition
// has that token. It returns an error matching errors.ErrUnsupported if the
// backend cannot do it. A waiter whose token is not known before its grant
// (Redis) has no token to name: use RevokeID.
func (l *Locker) Revoke(ctx context.Context, name string, token fencing.Token) (found bool, err error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	r, ok := l.drv.(Revoker)
	if !ok {
		return false, fmt.Errorf("fencelock: revoke %q: %w by this backend", name, errors.ErrUnsupported)
	}
	found, err = r.Revoke(ctx, name, token)
	if err != nil {
		return false, fmt.Errorf("fencelock: revoke %q token %d: %w", name, token, err)
	}
	return found, nil
}

// IDRevoker is implemented by a Driver that can end an acquisition on the
// server by its Entry.ID, which every acquisition has, waiting or holding.
type IDRevoker interface {
	// RevokeID ends the acquisition of lock name whose Entry.ID is id, as
	// an expiry would; found is false if there was none. An id that cannot
	// be one of the backend's returns an error matching ErrInvalidOption.
	RevokeID(ctx context.Context, name, id string) (found bool, err error)
}

// RevokeID ends the acquisition of lock name whose Entry.ID (as Status
// shows it) is id, on the server, as if its lease had expired: a revoked
// holder's loss signal fires and the next waiter is granted the lock; a
// revoked waiter's Acquire fails with an error matching ErrLeaseLost and the
// others keep their places. Unlike Revoke it reaches waiters whose token is
// not known before their grant (Redis). found is false if no acquisition of
// name has that id (it ended already). An empty id, or one that cannot be
// the backend's, returns an error matching ErrInvalidOption; a backend that
// cannot do it, one matching errors.ErrUnsupported.
func (l *Locker) RevokeID(ctx context.Context, name, id string) (found bool, err error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	if id == "" {
		return false, fmt.Errorf("fencelock: revoke %q: %w: empty acquisition id", name, ErrInvalidOption)
	}
	r, ok := l.drv.(IDRevoker)
	if !ok {
		return false, fmt.Errorf("fencelock: revoke %q: %w by this backend", name, errors.ErrUnsupported)
	}
	found, err = r.RevokeID(ctx, name, id)
	if err != nil {
		return false, fmt.Errorf("fencelock: revoke %q id %q: %w", name, id, err)
	}
	return found, nil
}
