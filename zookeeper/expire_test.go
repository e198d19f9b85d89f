package zookeeper

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/zktest"
	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
)

// expireSession ends conn's ZooKeeper session on the server for real: it
// opens a second connection that reuses the session id and password (the
// ZooKeeper protocol allows it; go-zookeeper's API does not, so this speaks
// the wire protocol) and closes the session from there. The server deletes
// the session's ephemeral nodes and conn finds its session expired.
func expireSession(t testing.TB, addr string, conn *zk.Conn) {
	t.Helper()
	id := conn.SessionID()
	pw := reflect.ValueOf(conn).Elem().FieldByName("passwd").Bytes()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))

	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd.
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, 10000)
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(pw)))
	req = append(req, pw...)
	writeFrame(t, c, req)
	resp := readFrame(t, c)
	require.GreaterOrEqual(t, len(resp), 16)
	got := int64(binary.BigEndian.Uint64(resp[8:16]))
	require.Equal(t, id, got, "the server did not resume session %x", id)

	// closeSession: xid 1, type -11.
	hdr := binary.BigEndian.AppendUint32(nil, 1)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(0xfffffff5))
	writeFrame(t, c, hdr)
	_ = readFrame(t, c) // the reply, or EOF
}

func writeFrame(t testing.TB, c net.Conn, b []byte) {
	t.Helper()
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	_, err := c.Write(append(frame, b...))
	require.NoError(t, err)
}

func readFrame(t testing.TB, c net.Conn) []byte {
	t.Helper()
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	_, err := io.ReadFull(c, b)
	require.NoError(t, err, fmt.Sprintf("frame of %d bytes", len(b)))
	return b
}

// A create sent while the connection is down waits in go-zookeeper's queue
// and, if the session expires meanwhile, can be applied in the next session
// of the same Conn: go-zookeeper keeps unsent requests while it moves on to
// the next server, and only fails them once it has tried every server. The
// acquisition fails with ErrLeaseLost and must delete that node, which
// would otherwise hold the lock for as long as the Locker lives. Two
// proxies to the one server stand for two servers. Both creates are
// checked: the Multi, and the plain create that follows a wait.
func TestCreateQueuedAcrossExpiryLeavesNoNode(t *testing.T) {
	for _, waited := range []bool{false, true} {
		t.Run(fmt.Sprintf("after_wait=%v", waited), func(t *testing.T) {
			// The create must be queued within go-zookeeper's 1s pause
			// between passes over the servers; a run where it was not,
			// and so never landed, is tried again.
			for range 3 {
				if createQueuedAcrossExpiry(t, waited) {
					return
				}
			}
			t.Fatal("in 3 tries the queued create never reached the server")
		})
	}
}

// createQueuedAcrossExpiry runs the scenario once and reports whether the
// queued create reached the server (in the new session); if it did, it
// checks that the node is gone.
func createQueuedAcrossExpiry(t *testing.T, waited bool) (landed bool) {
	pfx := testPrefix(t)
	admin := srv.Connect(t, 10*time.Second)
	p1, p2 := zktest.NewProxy(t, srv.Addr()), zktest.NewProxy(t, srv.Addr())
	const ttl = 6 * time.Second
	d, l := driverLocker(t, Config{Servers: []string{p1.Addr(), p2.Addr()}, Prefix: pfx, SessionTimeout: ttl})
	primeCreate(t, l, pfx, "q", waited)
	d.mu.Lock()
	conn := d.sessions[ttl].conn
	d.mu.Unlock()
	// A child that is not a lock keeps the directory (a container) from
	// being removed, so that the late create succeeds.
	dir := lockDir(pfx, "q")
	_, err := admin.Create(dir+"/keep", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	_, before, err := admin.Exists(dir)
	require.NoError(t, err)

	p1.Kill()
	p2.Kill()
	require.Eventually(t, func() bool { return conn.State() != zk.StateHasSession }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // go-zookeeper has tried both and pauses
	ch := goAcquire(tctx(t, 30*time.Second), l, "q")
	time.Sleep(100 * time.Millisecond) // the create waits in the queue
	expireSession(t, srv.Addr(), conn)
	p1.Revive()
	p2.Revive()

	r := waitAcquired(t, ch, 20*time.Second)
	require.ErrorIs(t, r.Err, backend.ErrLeaseLost)
	// The late create, if it comes, changes the directory's children.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_, st, err := admin.Exists(dir)
		require.NoError(t, err)
		if st.Cversion > before.Cversion {
			waitNodes(t, admin, pfx, "q", 0)
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
