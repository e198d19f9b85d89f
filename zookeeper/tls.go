package zookeeper

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/urlkit"
)

// tlsDialer opens the TLS connections of one go-zookeeper Conn (Config.TLS):
// every connection, the first and every reconnection to any server, goes
// through dial. It also keeps count of TLS failures, because go-zookeeper
// retries a failed connection forever without telling why: a wrong CA, a
// missing client certificate or a plain port would otherwise look like a
// server that is down.
type tlsDialer struct {
	cfg *tls.Config
	tcp zk.Dialer // nil: net.DialTimeout
	// limit is the number of TLS failures in a row (no server answering in
	// between) after which failed closes: one per server, a whole round.
	limit int

	mu       sync.Mutex
	failures int
	last     error // the last TLS failure
	failed   chan struct{}
	done     bool // failed is closed
}

func newTLSDialer(cfg *tls.Config, tcp zk.Dialer, servers int) *tlsDialer {
	return &tlsDialer{cfg: cfg, tcp: tcp, limit: max(servers, 1), failed: make(chan struct{})}
}

// dial implements zk.Dialer: it connects to addr and does the TLS handshake
// within timeout. The server name verified is cfg.ServerName, else the host
// of addr (a DNS name or an IP address, which crypto/tls checks against the
// certificate's DNS or IP SANs).
func (d *tlsDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var raw net.Conn
	if d.tcp != nil {
		raw, err = d.tcp(network, addr, timeout)
	} else {
		raw, err = net.DialTimeout(network, addr, timeout)
	}
	if err != nil {
		return nil, err
	}
	cfg := d.cfg
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := c.Handshake(); err != nil {
		_ = raw.Close()
		if urlkit.NotTLS(err) {
			err = fmt.Errorf("TLS handshake with %s: %w (the server does not seem to speak TLS there: is it a plain port? use zk://)", addr, err)
		} else {
			err = fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		if !isTimeout(err) {
			d.fail(err)
		}
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return &tlsConn{Conn: c, d: d, addr: addr}, nil
}

// fail counts a TLS failure.
func (d *tlsDialer) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failures++
	d.last = err
	if d.failures >= d.limit && !d.done {
		d.done = true
		close(d.failed)
	}
}

// answered notes that a server answered over TLS.
func (d *tlsDialer) answered() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failures = 0
}

// lastErr returns the last TLS failure, if any.
func (d *tlsDialer) lastErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// tlsConn is a TLS connection that reports a TLS alert received before the
// server's first byte (with TLS 1.3 a server refuses a client certificate
// after the handshake, on the client's first read) as a TLS failure.
type tlsConn struct {
	*tls.Conn
	d        *tlsDialer
	addr     string
	answered atomic.Bool
}

func (c *tlsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.answered.Load() {
		c.answered.Store(true)
		c.d.answered()
	}
	var oe *net.OpError
	if err != nil && !c.answered.Load() && errors.As(err, &oe) && oe.Op == "remote error" {
		c.d.fail(fmt.Errorf("TLS with %s: %w", c.addr, err))
	}
	return n, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// namedHosts is a zk.HostProvider that keeps the servers' names as given,
// for TLS: go-zookeeper's default provider resolves them to IP addresses
// once, and the dialer would then verify a certificate that names
// zk1.example.com against an IP address. Names are resolved at each dial
// instead. Like the default provider, it shuffles the servers and tries them
// in turn, and retryStart is true once all were tried without a connection.
type namedHosts struct {
	mu      sync.Mutex
	servers []string
	curr    int
	last    int
}

func (h *namedHosts) Init(servers []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(servers) == 0 {
		return errors.New("zookeeper: no servers")
	}
	h.servers = append([]string(nil), servers...)
	rand.Shuffle(len(h.servers), func(i, j int) { h.servers[i], h.servers[j] = h.servers[j], h.servers[i] })
	h.curr, h.last = -1, -1
	return nil
}

func (h *namedHosts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

func (h *namedHosts) Next() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retryStart := h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.curr], retryStart
}

func (h *namedHosts) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = h.curr
}
