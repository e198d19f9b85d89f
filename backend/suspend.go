package backend

// Suspender is an optional extension of DriverLease for backends whose
// client can lose its connection while the lease may still be alive on the
// server (ZooKeeper: a disconnected session lives on until its timeout, and
// the client cannot tell). It is Curator's SUSPENDED beside LOST: suspended
// means "cannot know", lost (the Lost channel, the loss signal) means
// "known gone or past the deadline".
type Suspender interface {
	// Suspended reports whether the lease's connection to the backend is
	// down now, and returns a channel that is closed at the next change of
	// that state (then call Suspended again).
	Suspended() (suspended bool, changed <-chan struct{})
}

// Suspended reports whether the connection behind ls is down now: the lease
// may or may not still be held, the loss signal fires at the local deadline
// unless the connection comes back first. changed is closed at the next
// change of that state. A holder that must not act while in doubt stops on
// suspension; the default (ignoring it) relies on the deadline. For backends
// that do not report suspension it returns false and a nil channel (which
// never fires).
func (ls *Lease) Suspended() (suspended bool, changed <-chan struct{}) {
	if s, ok := ls.drv.(Suspender); ok {
		return s.Suspended()
	}
	return false, nil
}
