// Package mem is an in-process fencelock backend with the same semantics as
// the networked ones: FIFO queues, leases that expire by TTL unless renewed,
// tokens that only grow, and a loss signal. Use it in your own unit tests, and
// to try fencelock without a server.
//
// Open it by URL as "mem://" (one process-wide server) or "mem://NAME" (a
// separate named server), after importing this package for its side effect,
// or build it directly with NewServer, Server.Connect and New. Conn.Cut
// simulates a client that crashed or was cut off: its calls fail and its
// leases expire on the server.
package mem
