package zktest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from its own 127.0.0.1 port to a server, so
// that a test can cut a client's connections without the client closing
// its session (the session then expires on the server after its timeout,
// as when a process dies or a network partitions).
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	dropRx bool // drop what the server sends
	killed bool
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to target; tb closes it at cleanup.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("zktest: proxy: %v", err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.killed {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(s, c, false) // client -> server
		go p.pipe(c, s, true)  // server -> client
	}
}

// pipe copies from src to dst; fromServer marks the direction DropReplies
// affects.
func (p *Proxy) pipe(dst, src net.Conn, fromServer bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			drop := fromServer && p.dropRx
			p.mu.Unlock()
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil {
			if err != io.EOF {
				break
			}
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// DropReplies makes the proxy swallow (on) or forward again (off) what the
// server sends on every connection: requests still reach the server, their
// replies are lost.
func (p *Proxy) DropReplies(on bool) {
	p.mu.Lock()
	p.dropRx = on
	p.mu.Unlock()
}

// Cut closes every connection through the proxy; clients may reconnect.
func (p *Proxy) Cut() {
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

// Kill cuts every connection and refuses new ones until Revive: to the
// client, the server is gone.
func (p *Proxy) Kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	p.Cut()
}

// Revive accepts connections again after Kill.
func (p *Proxy) Revive() {
	p.mu.Lock()
	p.killed = false
	p.mu.Unlock()
}

// Close stops the proxy and cuts its connections.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Kill()
	p.wg.Wait()
}
