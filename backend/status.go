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
	Holder   string            // the holder identity given with WithHolder
	Metadata map[string]string // given with WithMetadata
	Token    fencing.Token     // the token it holds, or will hold when granted (zero if unknown)
	TTLLeft  time.Duration     // time until the server expires it if not renewed; negative if unknown
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
