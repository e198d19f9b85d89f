package conformance

import (
	"context"
	"net"
	"net/url"
	"strings"
	"sync"

	"github.com/fencelock/fencelock/internal/dialhook"
	"github.com/fencelock/fencelock/internal/faultproxy"
)

// proxySet is one Locker's fault proxies: one per address it dials, so
// that Crash and Partition reach all its connections.
type proxySet struct {
	mu          sync.Mutex
	byTarget    map[string]*faultproxy.Proxy
	partitioned bool
	cut         bool
}

// dialsThroughHook reports whether the harness reaches a URL's servers
// through the client's dial hook (see dialhook) rather than by rewriting
// the URL's hosts: every Redis scheme. A Sentinel's or Cluster's client
// dials addresses it learns from the servers (the primary, the nodes), so
// only the hook puts a proxy in front of every one of them; and a TLS
// client keeps checking each server's certificate against the address it
// meant to dial, not the proxy's.
func dialsThroughHook(u *url.URL) bool {
	return strings.HasPrefix(u.Scheme, "redis")
}

// proxy returns the set's proxy to target, started on first use with the
// set's faults.
func (s *proxySet) proxy(target string) (*faultproxy.Proxy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.byTarget[target]; ok {
		return p, nil
	}
	p, err := faultproxy.Start(target)
	if err != nil {
		return nil, err
	}
	if s.partitioned {
		p.Partition()
	}
	if s.cut {
		p.Cut()
	}
	if s.byTarget == nil {
		s.byTarget = make(map[string]*faultproxy.Proxy)
	}
	s.byTarget[target] = p
	return p, nil
}

// dial is the set's dialhook.Func: every connection goes through the
// proxy to its address.
func (s *proxySet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	p, err := s.proxy(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, network, p.Addr())
}

var _ dialhook.Func = (*proxySet)(nil).dial

// each runs f on every proxy of the set, under its lock.
func (s *proxySet) each(f func(*faultproxy.Proxy)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.byTarget {
		f(p)
	}
}

// Partition partitions every proxy, and those started later.
func (s *proxySet) Partition() {
	s.each(func(p *faultproxy.Proxy) { p.Partition() })
	s.mu.Lock()
	s.partitioned = true
	s.mu.Unlock()
}

// Heal heals every proxy.
func (s *proxySet) Heal() {
	s.mu.Lock()
	s.partitioned = false
	s.mu.Unlock()
	s.each(func(p *faultproxy.Proxy) { p.Heal() })
}

// Cut cuts every proxy, and those started later, for good.
func (s *proxySet) Cut() {
	s.mu.Lock()
	s.cut = true
	s.mu.Unlock()
	s.each(func(p *faultproxy.Proxy) { p.Cut() })
}

// Close closes every proxy.
func (s *proxySet) Close() { s.each(func(p *faultproxy.Proxy) { p.Close() }) }
