package zookeeper

import (
	"bufio"
	"net"
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
