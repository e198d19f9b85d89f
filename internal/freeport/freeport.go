// Package freeport finds TCP ports on 127.0.0.1 for the servers the tests
// start. A port is only known to have been free when it was found: a server
// that fails to bind it should be started again on another.
//
// The ports are picked below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default), at
// random: a server restarted on its port (a crash played by a test) would
// otherwise find it taken by the local end of some client's connection,
// which the kernel picks from that range and which a busy test run opens
// by the thousand (seen: a Docker member's restart failing with "address
// already in use" on its published port). Only another explicit pick can
// take such a port, one chance in thousands.
//
// A process never hands out the same port twice: a port is free only until
// its server binds it, and two tests of one process that start servers at
// once (a local one and a container on the host's network, say) must not
// both get it in that gap. Across processes (go test's packages run at
// once) the random pick makes a collision rare, and a server that then
// cannot bind its port starts again on another.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the lowest port picked: above the well-known and the usual
// registered service ports a developer's machine may run.
const lowest = 10000

// Port returns a port that was free a moment ago on 127.0.0.1.
func Port() (int, error) {
	ps, err := Ports(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// given holds every port this process handed out.
var given struct {
	sync.Mutex
	ports map[int]bool
}

// Ports returns n distinct ports that were free a moment ago on 127.0.0.1
// (all held open until all are found, so they differ), none of them
// returned before in this process.
func Ports(n int) ([]int, error) {
	given.Lock()
	defer given.Unlock()
	if given.ports == nil {
		given.ports = make(map[int]bool)
	}
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	hi := ephemeralLow()
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0" // the kernel's pick, if the range below is too small or full
		if hi-lowest >= 1000 && tries < 100*n {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(lowest+rand.IntN(hi-lowest)))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: another
			}
			return nil, err
		}
		ls = append(ls, l)
		port := l.Addr().(*net.TCPAddr).Port
		if given.ports[port] {
			if tries > 1000*n {
				return nil, errors.New("freeport: no port left that this process has not handed out")
			}
			continue // handed out before: another (held open meanwhile, so not picked again now)
		}
		ports = append(ports, port)
	}
	for _, p := range ports {
		given.ports[p] = true
	}
	return ports, nil
}

// ephemeralLow returns the first port of the kernel's ephemeral range, or
// 32768 (Linux's default) if it cannot be read.
func ephemeralLow() int {
	lo, err := readEphemeralLow()
	if err != nil {
		return 32768
	}
	return lo
}

func readEphemeralLow() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, errors.New("ip_local_port_range: not two numbers")
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < 1 || lo > 65535 {
		return 0, fmt.Errorf("ip_local_port_range: %q", f[0])
	}
	return lo, nil
}
