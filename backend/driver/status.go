package driver

import (
	"time"

	"github.com/fencelock/fencelock/fencing"
)

// Status is what a backend can tell about one lock (backend.Status is the
// same, for users).
type Status struct {
	Holder  *Entry  // nil if the lock is free
	Waiters []Entry // in the order they will be granted, where the backend queues them
}

// Entry is one acquisition holding or waiting for a lock; backend.Entry
// documents its fields.
type Entry struct {
	ID       string            // the backend's id of the acquisition, for RevokeID
	Holder   string            // the holder identity stored with it (Request.Holder)
	Metadata map[string]string // the metadata stored with it (Request.Metadata)
	Token    fencing.Token     // the token it holds, or will hold when granted; zero if unknown
	TTLLeft  time.Duration     // negative if unknown
	Value    string            // the value stored with it (Request.Value)
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
