package mem

import (
	"context"
	"net/url"
	"sync"

	"github.com/fencelock/fencelock/backend"
)

var (
	serversMu sync.Mutex
	servers   = map[string]*Server{}
)

// Named returns the process-wide server called name ("" is the default one),
// the same one every mem:// URL with that host reaches.
func Named(name string) *Server {
	serversMu.Lock()
	defer serversMu.Unlock()
	s := servers[name]
	if s == nil {
		s = NewServer()
		servers[name] = s
	}
	return s
}

func init() {
	backend.Register("mem", backend.Scheme{
		Open: func(_ context.Context, u *url.URL) (backend.Driver, error) {
			return &driver{conn: Named(u.Host).Connect()}, nil
		},
	})
}
