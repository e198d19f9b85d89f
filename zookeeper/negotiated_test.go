package zookeeper

import (
	"fmt"
	"io"
	"net"
	"reflect"
	"regexp"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/zktest"
)

// go-zookeeper has no accessor for the session timeout the server granted
// (v1.0.4, the newest release: the connect response's timeout goes to the
// unexported Conn.sessionTimeoutMs, and no Event carries it), yet a lease's
// TTL is that timeout. So negotiatedTimeout reads the field by reflection,
// and these tests pin it: an upgrade that renames or retypes the field, or
// stops storing the granted value in it, fails here by name rather than as
// a Dial that refuses every server.

func zkModuleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/go-zookeeper/zk" {
				return m.Version
			}
		}
	}
	return "(unknown version)"
}

func TestNegotiatedTimeoutFieldExists(t *testing.T) {
	f, ok := reflect.TypeFor[zk.Conn]().FieldByName("sessionTimeoutMs")
	require.True(t, ok, "go-zookeeper %s: zk.Conn has no sessionTimeoutMs field any more; "+
		"negotiatedTimeout (session.go) must read the granted session timeout another way", zkModuleVersion())
	require.Equal(t, reflect.Int32, f.Type.Kind(), "go-zookeeper %s: zk.Conn.sessionTimeoutMs is a %v, not an int32 of milliseconds; "+
		"fix negotiatedTimeout (session.go)", zkModuleVersion(), f.Type)
}

// The value read is the one the server granted, also for requests outside
// the server's bounds (2*tickTime to maxSessionTimeout), which it clamps:
// checked against the server's own record of the session (the cons
// four-letter command).
func TestNegotiatedTimeoutIsWhatTheServerGranted(t *testing.T) {
	for _, tc := range []struct {
		name           string
		asked, granted time.Duration
	}{
		{"below the minimum", zktest.TickTime / 2, 2 * zktest.TickTime},
		{"within bounds", 3 * time.Second, 3 * time.Second},
		{"above the maximum", zktest.MaxSessionTimeout + 80*time.Second, zktest.MaxSessionTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, _, err := zk.Connect([]string{srv.Addr()}, tc.asked, zk.WithLogger(zktest.Quiet()), zk.WithLogInfo(false))
			require.NoError(t, err)
			defer conn.Close()
			got, err := NegotiatedTimeout(conn, 10*time.Second)
			require.NoError(t, err, "go-zookeeper %s", zkModuleVersion())
			require.Equal(t, tc.granted, got, "go-zookeeper %s: sessionTimeoutMs does not hold the granted timeout", zkModuleVersion())
			require.Equal(t, tc.granted, serverSessionTimeout(t, srv, conn.SessionID()), "the server's record of the session")
		})
	}
}

// serverSessionTimeout returns the timeout the server records for session
// id, from its cons output ("...sid=0x...,...,to=4000,...").
func serverSessionTimeout(t *testing.T, s *zktest.Server, id int64) time.Duration {
	t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`sid=0x%x,[^)]*\bto=(\d+)`, id))
	var last []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
		require.NoError(t, err)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Write([]byte("cons"))
		require.NoError(t, err)
		last, err = io.ReadAll(c)
		c.Close()
		require.NoError(t, err)
		if m := re.FindSubmatch(last); m != nil {
			ms, err := strconv.Atoi(string(m[1]))
			require.NoError(t, err)
			return time.Duration(ms) * time.Millisecond
		}
	}
	t.Fatalf("session 0x%x not in the server's cons output: %s", id, last)
	return 0
}
