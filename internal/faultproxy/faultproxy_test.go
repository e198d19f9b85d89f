package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = bufio.NewReader(c).WriteTo(c) }()
		}
	}()
	return ln.Addr().String()
}

func TestForwardsThenCuts(t *testing.T) {
	p, err := Start(echoServer(t))
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("ping\n"))
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "ping\n", line)

	p.Cut()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(make([]byte, 1))
	assert.Error(t, err, "a cut connection must be closed")

	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err) // the listener is still there...
	defer c2.Close()
	require.NoError(t, c2.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c2.Read(make([]byte, 1))
	assert.Error(t, err, "...but a new connection is closed at once")
}
