// Package dialhook carries a dial function in a context, from the
// conformance suite's URL harness to the adapters that discover the
// addresses they dial (a Redis Sentinel client dials the primary the
// Sentinels name, a cluster client the nodes the cluster lists), so that
// the harness can put a fault proxy in front of each of them, which
// rewriting the URL's hosts cannot do.
package dialhook

import (
	"context"
	"net"
)

// Func dials addr as net.Dialer.DialContext does.
type Func func(ctx context.Context, network, addr string) (net.Conn, error)

type key struct{}

// With returns ctx carrying f.
func With(ctx context.Context, f Func) context.Context { return context.WithValue(ctx, key{}, f) }

// From returns the Func ctx carries, or nil.
func From(ctx context.Context) Func {
	f, _ := ctx.Value(key{}).(Func)
	return f
}
