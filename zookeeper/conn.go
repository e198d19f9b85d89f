package zookeeper

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// readBufferSize is the read buffer of each connection to a server.
const readBufferSize = 16 << 10

// buffered wraps dial so that its connections read through a buffer.
// go-zookeeper reads each packet in two reads, its length and then its
// body, and on a plain connection each read is a system call; through the
// buffer one call usually brings both, and any packets that came after
// them. Under contention a client receives a packet for every request and
// watch event, so this halves its read calls or better.
func buffered(dial zk.Dialer) zk.Dialer {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, readBufferSize)}, nil
	}
}

// bufferedConn is a connection whose reads go through r.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// dialWatch follows the connections of one Conn while it waits for its
// first session, for the error of a dial that gets none: go-zookeeper
// retries forever and says nothing. It keeps the last failure (a refused
// connection, a TLS error), notes a server that accepted a connection but
// never answered, and reports, once, an address whose server closed the
// connection before answering (as a TLS server does with a plain client),
// on closedEarly.
type dialWatch struct {
	mu          sync.Mutex
	last        error
	silent      string // an address that accepted and has not answered
	answered    bool
	closedEarly chan string
	reported    bool
}

func newDialWatch() *dialWatch { return &dialWatch{closedEarly: make(chan string, 1)} }

// wrap returns dial, watched.
func (w *dialWatch) wrap(dial zk.Dialer) zk.Dialer {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, addr, timeout)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.last = fmt.Errorf("connect to %s: %w", addr, err)
			return nil, err
		}
		if !w.answered {
			w.silent = addr
		}
		return &watchedConn{Conn: c, w: w, addr: addr}, nil
	}
}

func (w *dialWatch) note(addr string, n int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n > 0 {
		w.answered, w.silent = true, ""
		return
	}
	if err == nil || isTimeout(err) || w.answered {
		return
	}
	w.last = fmt.Errorf("%s closed the connection before answering: %w", addr, err)
	if !w.reported {
		w.reported = true
		w.closedEarly <- addr
	}
}

// why describes what went wrong, or nil if nothing was seen.
func (w *dialWatch) why() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.silent != "" && !w.answered:
		return fmt.Errorf("%s accepted the connection but did not answer the session request", w.silent)
	case w.last != nil:
		return w.last
	}
	return nil
}

// watchedConn reports its first read to its dialWatch.
type watchedConn struct {
	net.Conn
	w    *dialWatch
	addr string
	read atomic.Bool
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.read.Load() && (n > 0 || err != nil) {
		if n > 0 {
			c.read.Store(true)
		}
		c.w.note(c.addr, n, err)
	}
	return n, err
}
