package zookeeper

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

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
