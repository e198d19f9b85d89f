package mem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

// MinTTL is the shortest TTL the mem backend accepts.
const MinTTL = 10 * time.Millisecond

// ttlLimits are the mem backend's TTL limits, from which its Capabilities,
// its URLs' Limits, its suite profile and its CheckTTL derive: any TTL of
// MinTTL or more.
var ttlLimits = driver.TTLLimits{Min: MinTTL}

// Server is an in-process lock server: FIFO queues per lock name, leases that
// expire by TTL unless kept alive, and one token counter that only grows, so
// every grant's token is greater than every earlier one. Clients reach it
// through a Conn, which can be cut to simulate a crash or a partition.
type Server struct {
	mu     sync.Mutex
	last   fencing.Token
	nextID uint64
	queues map[string][]*lease // per lock name; the head holds the lock
	// delayed maps a lock name to the end of the lock-delay its last
	// holder left (driver.Request.LockDelay): its queue's head is granted
	// only then. An entry goes when its timer fires.
	delayed map[string]time.Time
}

// lease is one acquisition on the server: created by NewLease, queued by Lock.
type lease struct {
	id      uint64
	name    string
	ttl     time.Duration
	holder  string
	meta    map[string]string
	value   string        // the election value (driver.Request.Value), if any
	delay   time.Duration // driver.Request.LockDelay
	expiry  *time.Timer
	renewed time.Time     // when the expiry clock last started
	token   fencing.Token // zero until queued
	queued  bool
	granted chan struct{}   // closed when it reaches the head of its queue
	gone    context.Context // done when it expires, is revoked or released
	end     context.CancelFunc
	ended   bool
	endedBy error // why it ended: backend.ErrExpired or ErrRevoked; nil if released
}

// NewServer returns an empty server.
func NewServer() *Server {
	return &Server{queues: make(map[string][]*lease), delayed: make(map[string]time.Time)}
}

// Connect returns a new client connection to s.
func (s *Server) Connect() *Conn { return &Conn{srv: s, cut: make(chan struct{})} }

// Revoke ends the lease that holds or waits for lock name with token, as an
// operator or an expiry would; it reports whether there was one.
func (s *Server) Revoke(name string, token fencing.Token) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.queues[name] {
		if l.token == token {
			s.endLocked(l, backend.ErrRevoked, false)
			return true
		}
	}
	return false
}

// RevokeID ends the lease that holds or waits for lock name whose
// driver.Entry.ID is id, as Revoke does; it reports whether there was one.
func (s *Server) RevokeID(name, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.queues[name] {
		if l.idString() == id {
			s.endLocked(l, backend.ErrRevoked, false)
			return true
		}
	}
	return false
}

// idString is l's driver.Entry.ID: its lease number.
func (l *lease) idString() string { return strconv.FormatUint(l.id, 10) }

// Holder returns the token of the current holder of name, or zero.
func (s *Server) Holder(name string) fencing.Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[name]; len(q) > 0 {
		return q[0].token
	}
	return 0
}

// Queued returns how many acquisitions hold or wait for name.
func (s *Server) Queued(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues[name])
}

func (s *Server) grant(req driver.Request) *lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	l := &lease{id: s.nextID, name: req.Name, ttl: req.TTL, holder: req.Holder, meta: req.Metadata,
		delay: req.LockDelay, granted: make(chan struct{})}
	if req.Value != nil {
		l.value = *req.Value
	}
	l.gone, l.end = context.WithCancel(context.Background())
	l.renewed = time.Now()
	l.expiry = time.AfterFunc(req.TTL, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.endLocked(l, backend.ErrExpired, false)
	})
	return l
}

func (s *Server) keepAlive(l *lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.ended {
		return l.endError("")
	}
	l.expiry.Reset(l.ttl)
	l.renewed = time.Now()
	return nil
}

// proclaim replaces l's value if l still holds its lock.
func (s *Server) proclaim(l *lease, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.ended {
		return l.endError("")
	}
	if q := s.queues[l.name]; len(q) == 0 || q[0] != l {
		return fmt.Errorf("%w: mem lease %d no longer holds %q", backend.ErrLeaseLost, l.id, l.name)
	}
	l.value = value
	return nil
}

// status lists name's queue: the holder first.
func (s *Server) status(name string) driver.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	var entries []driver.Entry
	for _, l := range s.queues[name] {
		entries = append(entries, driver.Entry{ID: l.idString(), Holder: l.holder, Metadata: l.meta, Token: l.token,
			TTLLeft: max(time.Until(l.renewed.Add(l.ttl)), 0), Value: l.value})
	}
	return driver.Queued(entries)
}

// enqueue appends l to its queue with a fresh token. Without wait it fails if
// the queue is not empty, leaving nothing behind.
func (s *Server) enqueue(l *lease, wait bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case l.ended:
		return l.endError("")
	case l.queued:
		return errors.New("mem: lease already queued")
	case !wait && len(s.queues[l.name]) > 0:
		return fmt.Errorf("%w: held with token %d", backend.ErrNotAcquired, s.queues[l.name][0].token)
	case !wait && s.delayingLocked(l.name):
		return fmt.Errorf("%w: in the lock-delay of a holder whose lease ended", backend.ErrNotAcquired)
	}
	s.last++
	l.token, l.queued = s.last, true
	s.queues[l.name] = append(s.queues[l.name], l)
	s.grantHeadLocked(l.name)
	return nil
}

// delayingLocked reports whether lock name is in a lock-delay now.
func (s *Server) delayingLocked(name string) bool {
	until, ok := s.delayed[name]
	return ok && time.Now().Before(until)
}

// grantHeadLocked grants lock name to the head of its queue, unless it is
// granted already or the lock is in a lock-delay (whose timer calls it
// again).
func (s *Server) grantHeadLocked(name string) {
	q := s.queues[name]
	if len(q) == 0 || s.delayingLocked(name) {
		return
	}
	select {
	case <-q[0].granted:
	default:
		close(q[0].granted)
	}
}

// release ends l; it reports ErrLeaseLost if l had been granted but was
// already gone. A release after a loss (lost) leaves l's lock-delay.
func (s *Server) release(l *lease, wasGranted, lost bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.ended {
		if wasGranted {
			return l.endError(" before release")
		}
		return nil
	}
	s.endLocked(l, nil, !lost)
	return nil
}

// endLocked ends l, why: backend.ErrExpired or ErrRevoked, nil for a
// release; by its holder's clean release if clean, else (an expiry, a
// revocation, a release after a loss) leaving l's lock-delay if it held
// the lock.
func (s *Server) endLocked(l *lease, why error, clean bool) {
	if l.ended {
		return
	}
	l.ended, l.endedBy = true, why
	l.expiry.Stop()
	l.end()
	q := s.queues[l.name]
	if len(q) > 0 && q[0] == l && l.delay > 0 && !clean && isClosed(l.granted) {
		// Only a holder leaves a delay (the head of a queue in a delay
		// is not granted yet), and a later end never shortens one.
		until := time.Now().Add(l.delay)
		if cur, ok := s.delayed[l.name]; !ok || until.After(cur) {
			s.delayed[l.name] = until
		}
		name := l.name
		time.AfterFunc(l.delay, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if until, ok := s.delayed[name]; ok && !time.Now().Before(until) {
				delete(s.delayed, name)
				s.grantHeadLocked(name)
			}
		})
	}
	for i, o := range q {
		if o == l {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(s.queues, l.name)
		return
	}
	s.queues[l.name] = q
	s.grantHeadLocked(l.name)
}

// wait blocks until l holds the lock, l ends, or ctx or cut is done.
func (s *Server) wait(ctx context.Context, l *lease, cut <-chan struct{}) error {
	select {
	case <-l.granted:
		// A lease can be granted and end at once; report the end.
		s.mu.Lock()
		defer s.mu.Unlock()
		if l.ended {
			return l.endError("")
		}
		return nil
	case <-l.gone.Done():
		return l.endError(" while waiting")
	case <-cut:
		return errConnCut
	case <-ctx.Done():
		return ctx.Err()
	}
}

// endError is the error of a call on l once it ended (s.mu held): its
// cause, matching backend.ErrLeaseLost; when says when it was found.
func (l *lease) endError(when string) error {
	return fmt.Errorf("%w: mem lease %d%s", cmp.Or(l.endedBy, backend.ErrLeaseLost), l.id, when)
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
