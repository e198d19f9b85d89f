// Package faultproxy is a TCP proxy on 127.0.0.1 that tests put between a
// client and a server so that they can cut the client off (a crash, as the
// server sees it: Cut) or partition the two (nothing is closed, nothing
// passes: Partition, until Heal) without touching either.
package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection it accepts to one target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	links map[*link]struct{}
	cut   bool
	// healed is closed while the proxy forwards; Partition replaces it
	// with an open channel, which Heal closes.
	healed chan struct{}
	// answering is healed for the target's bytes alone: HoldReplies
	// replaces it with an open channel, which Heal closes.
	answering chan struct{}
	// connecting is healed for the connections accepted from then on:
	// HoldNew replaces it with an open channel, which Heal closes.
	connecting chan struct{}
	// latency is how long each chunk of bytes waits before it is
	// forwarded, in either direction (SetLatency).
	latency time.Duration
	wg      sync.WaitGroup // serve, and every link's goroutines
}

// link is one client connection and, once dialled, its connection to the
// target.
type link struct {
	client net.Conn
	server net.Conn // nil until dialled
	// ctx is cancelled when the link is torn down: it wakes whatever
	// waits for it (a dial, a held write).
	ctx    context.Context
	cancel context.CancelFunc
	closed bool
}

// closeLocked tears l down: both connections closed, its goroutines woken
// wherever they wait. p.mu is held.
func (l *link) closeLocked() {
	if l.closed {
		return
	}
	l.closed = true
	l.cancel()
	_ = l.client.Close()
	if l.server != nil {
		_ = l.server.Close()
	}
}

// Start listens on a free 127.0.0.1 port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	healed, answering, connecting := make(chan struct{}), make(chan struct{}), make(chan struct{})
	close(healed)
	close(answering)
	close(connecting)
	p := &Proxy{ln: ln, target: target, links: make(map[*link]struct{}), healed: healed, answering: answering,
		connecting: connecting}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the host:port clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection through the proxy and closes new ones at once:
// the client is cut off, the server sees its connections drop. It is for
// good: nothing undoes it (Heal does not).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for l := range p.links {
		l.closeLocked()
	}
}

// Drop closes every connection through the proxy, as a server that
// crashed and came back would, and goes on forwarding new ones; what was
// held by a Partition or HoldReplies is dropped with its connection. After
// HoldReplies, Drop then Heal lose the answers to requests the target has
// acted on, and let the client's next connection through: a lost answer.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.closeLocked()
	}
}

// Partition stops forwarding, in both directions, on every connection,
// and keeps them all open: what either side sends is held (not dropped)
// until Heal, and a connection accepted meanwhile is not connected to the
// target until Heal. To both sides it looks like a network partition:
// requests time out, nothing is closed. Bytes already being written when
// Partition is called may still arrive, as packets already on the wire
// would. Partitioning a partitioned proxy does nothing.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	hold(&p.healed)
}

// hold replaces *gate with an open channel if it is closed (forwarding),
// so that what waits for it waits until Heal closes it; a gate already
// holding is left as it is. p.mu must be held.
func hold(gate *chan struct{}) {
	select {
	case <-*gate:
		*gate = make(chan struct{})
	default:
	}
}

// HoldReplies stops forwarding what the target sends, and only that, until
// Heal: requests reach the target, their answers are held (not dropped).
// To the client it looks like a slow return path, or a client paused just
// after sending: the target acted on a request whose answer comes late.
func (p *Proxy) HoldReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	hold(&p.answering)
}

// HoldNew leaves the connections accepted from now on unconnected to the
// target until Heal, and the ones already made as they are: to the client
// a new connection is accepted and then never answered, as when a
// partition strikes while it connects, while its pooled connections go on
// working.
func (p *Proxy) HoldNew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	hold(&p.connecting)
}

// SetLatency makes every chunk of bytes read from either side wait d
// before it is forwarded, so that a request and its answer take 2d longer;
// bytes read behind a waiting chunk wait after it, as on a slow link. Zero
// (the default) forwards at once. It applies to what is read from then on.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
}

// Heal ends a Partition, HoldReplies or HoldNew: the proxy forwards again,
// first what it held, in order, and connects the connections accepted
// meanwhile. Healing a proxy that is not partitioned does nothing.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range []chan struct{}{p.healed, p.answering, p.connecting} {
		select {
		case <-c:
		default:
			close(c)
		}
	}
}

// Close stops the proxy and closes every connection through it, held ones
// included, and returns once all its goroutines have ended.
func (p *Proxy) Close() {
	p.Cut()
	_ = p.ln.Close()
	p.wg.Wait()
}

// waitHealed returns true once the proxy forwards (at once if it is not
// partitioned), the target's bytes too if reply, false if l is torn down
// first.
func (p *Proxy) waitHealed(l *link, reply bool) bool {
	p.mu.Lock()
	healed, answering := p.healed, p.answering
	p.mu.Unlock()
	if !reply {
		answering = nil
	}
	for _, c := range []chan struct{}{healed, answering} {
		if c == nil {
			continue
		}
		select {
		case <-c:
		case <-l.ctx.Done():
			return false
		}
	}
	return true
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = client.Close()
			continue
		}
		l := &link{client: client}
		l.ctx, l.cancel = context.WithCancel(context.Background())
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.forward(l)
	}
}

func (p *Proxy) forward(l *link) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		l.closeLocked()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	// A connection accepted during a partition (or HoldNew) reaches the
	// target only once it heals.
	p.mu.Lock()
	connecting := p.connecting
	p.mu.Unlock()
	select {
	case <-connecting:
	case <-l.ctx.Done():
		return
	}
	if !p.waitHealed(l, false) {
		return
	}
	var d net.Dialer
	server, err := d.DialContext(l.ctx, "tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if l.closed {
		p.mu.Unlock()
		_ = server.Close()
		return
	}
	l.server = server
	p.mu.Unlock()

	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() { defer pipes.Done(); p.pipe(l, server, l.client, false) }()
	go func() { defer pipes.Done(); p.pipe(l, l.client, server, true) }()
	pipes.Wait()
}

// pipe copies src to dst, holding what it read while the proxy is
// partitioned (or, for the target's replies, held). At src's end of file
// it half-closes dst, so the other direction can finish; on any other
// error it tears l down.
func (p *Proxy) pipe(l *link, dst, src net.Conn, reply bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.delay(l) || !p.waitHealed(l, reply) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				p.teardown(l)
				return
			}
		}
		if errors.Is(err, io.EOF) {
			if !p.waitHealed(l, reply) { // the end of file passes no sooner than data
				return
			}
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				return
			}
			p.teardown(l)
			return
		}
		if err != nil {
			p.teardown(l)
			return
		}
	}
}

// delay waits the proxy's latency; it returns false if l is torn down
// first.
func (p *Proxy) delay(l *link) bool {
	p.mu.Lock()
	d := p.latency
	p.mu.Unlock()
	if d == 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.ctx.Done():
		return false
	}
}

func (p *Proxy) teardown(l *link) {
	p.mu.Lock()
	l.closeLocked()
	p.mu.Unlock()
}
