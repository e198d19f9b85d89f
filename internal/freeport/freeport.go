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
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
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

// Ports returns n distinct ports that were free a moment ago on 127.0.0.1
// (all held open until all are found, so they differ).
func Ports(n int) ([]int, error) {
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
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
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
