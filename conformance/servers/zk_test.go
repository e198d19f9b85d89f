package servers_test

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// zkMode asks a ZooKeeper server for its mode with the srvr command.
func zkMode(t testing.TB, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatalf("srvr %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "srvr"); err != nil {
		t.Fatalf("srvr %s: %v", addr, err)
	}
	b, _ := io.ReadAll(c)
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode: "); ok {
			return m
		}
	}
	return ""
}
