package mem

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/urlkit"
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
	driver.Register("mem", driver.Scheme{
		Suite: driver.StaticSuite(suiteProfile),
		Check: func(u *url.URL) (driver.Limits, error) {
			return ttlLimits.Limits(driver.Limits{LockDelay: true}), checkURL(u)
		},
		Open: func(_ context.Context, u *url.URL) (driver.Driver, error) {
			return openURL(u)
		},
	})
}

// openURL connects to the server a mem URL names: mem://name, or mem:// for
// the default one. A userinfo, a port, a path or a name with characters a
// host name cannot hold is an error matching backend.ErrInvalidURL.
func openURL(u *url.URL) (driver.Driver, error) {
	if err := checkURL(u); err != nil {
		return nil, err
	}
	return &memDriver{conn: Named(u.Host).Connect()}, nil
}

func checkURL(u *url.URL) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", backend.ErrInvalidURL, urlkit.Redact(u), fmt.Sprintf(format, args...))
	}
	switch {
	case u.Scheme != "mem":
		return bad("scheme %q is not mem", u.Scheme)
	case u.User != nil:
		return bad("mem:// takes no user name or password")
	case strings.Contains(u.Host, ":"):
		return bad("mem:// takes a server name, not host:port: want mem://name")
	case strings.Contains(u.Host, ","):
		return bad("mem:// takes one server name, not a list")
	case u.Path != "" && u.Path != "/":
		return bad("unexpected path: want mem://name")
	}
	return nil
}
