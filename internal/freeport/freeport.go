// Package freeport finds TCP ports on 127.0.0.1 for the servers the tests
// start. A port is only known to have been free when it was found: a server
// that fails to bind it should be started again on another.
package freeport

import "net"

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
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
