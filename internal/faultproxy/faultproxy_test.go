package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
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

// acceptServer listens on 127.0.0.1 and hands the test every connection it
// accepts, so the test can play the server (write first, see what arrives).
func acceptServer(t *testing.T) (string, <-chan net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns := make(chan net.Conn, 16)
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	return ln.Addr().String(), conns
}

func dial(t *testing.T, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// nothingFor asserts that a read on c finds nothing for d: it times out,
// the connection neither delivers a byte nor ends.
func nothingFor(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	n, err := c.Read(make([]byte, 64))
	require.Zero(t, n, "bytes passed a partition")
	var ne net.Error
	require.ErrorAs(t, err, &ne, "the connection ended during a partition: %v", err)
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	return string(b)
}

func accepted(t *testing.T, conns <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-conns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy did not connect to the server")
		return nil
	}
}

func TestPartitionHoldsBothWaysThenHeals(t *testing.T) {
	target, conns := acceptServer(t)
	p, err := Start(target)
	require.NoError(t, err)
	defer p.Close()
	c := dial(t, p.Addr())
	_, err = c.Write([]byte("hello"))
	require.NoError(t, err)
	s := accepted(t, conns)
	require.Equal(t, "hello", readN(t, s, 5))

	p.Partition()
	p.Partition() // idempotent
	var want strings.Builder
	for i := range 50 {
		msg := fmt.Sprintf("c%02d;", i)
		want.WriteString(msg)
		_, err := c.Write([]byte(msg))
		require.NoError(t, err)
	}
	_, err = s.Write([]byte("from-server"))
	require.NoError(t, err)
	nothingFor(t, s, 300*time.Millisecond)
	nothingFor(t, c, 300*time.Millisecond)

	p.Heal()
	p.Heal() // idempotent
	assert.Equal(t, want.String(), readN(t, s, want.Len()), "held bytes arrive, in order")
	assert.Equal(t, "from-server", readN(t, c, len("from-server")))
	// And the connection goes on working.
	_, err = c.Write([]byte("after"))
	require.NoError(t, err)
	assert.Equal(t, "after", readN(t, s, 5))
}

func TestHoldRepliesPassesRequests(t *testing.T) {
	target, conns := acceptServer(t)
	p, err := Start(target)
	require.NoError(t, err)
	defer p.Close()
	c := dial(t, p.Addr())
	_, err = c.Write([]byte("a"))
	require.NoError(t, err)
	s := accepted(t, conns)
	require.Equal(t, "a", readN(t, s, 1))

	p.HoldReplies()
	_, err = c.Write([]byte("request"))
	require.NoError(t, err)
	assert.Equal(t, "request", readN(t, s, len("request")), "requests pass")
	_, err = s.Write([]byte("answer"))
	require.NoError(t, err)
	nothingFor(t, c, 300*time.Millisecond)

	p.Heal()
	assert.Equal(t, "answer", readN(t, c, len("answer")), "the held answer arrives")
}

// A lost answer: HoldReplies, the request passes and is answered, Drop
// closes the connection with the answer undelivered, Heal lets the next
// connection through both ways.
func TestDropLosesHeldReplies(t *testing.T) {
	target, conns := acceptServer(t)
	p, err := Start(target)
	require.NoError(t, err)
	defer p.Close()
	c := dial(t, p.Addr())
	_, err = c.Write([]byte("a"))
	require.NoError(t, err)
	s := accepted(t, conns)
	require.Equal(t, "a", readN(t, s, 1))

	p.HoldReplies()
	_, err = c.Write([]byte("request"))
	require.NoError(t, err)
	require.Equal(t, "request", readN(t, s, len("request")), "the request passes")
	_, err = s.Write([]byte("answer"))
	require.NoError(t, err)
	nothingFor(t, c, 100*time.Millisecond)
	p.Drop()
	p.Heal()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	b, err := io.ReadAll(c)
	assert.Empty(t, string(b), "the held answer was lost")
	var ne net.Error
	if errors.As(err, &ne) {
		assert.False(t, ne.Timeout(), "the connection was left open")
	}
	require.NoError(t, s.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = s.Read(make([]byte, 1))
	assert.Error(t, err, "the target's side is closed too")

	c2 := dial(t, p.Addr())
	_, err = c2.Write([]byte("again"))
	require.NoError(t, err)
	s2 := accepted(t, conns)
	require.Equal(t, "again", readN(t, s2, 5))
	_, err = s2.Write([]byte("answered"))
	require.NoError(t, err)
	assert.Equal(t, "answered", readN(t, c2, len("answered")), "a new connection is answered")
}

func TestPartitionHoldsNewConnections(t *testing.T) {
	target, conns := acceptServer(t)
	p, err := Start(target)
	require.NoError(t, err)
	defer p.Close()

	p.Partition()
	c := dial(t, p.Addr()) // accepted...
	_, err = c.Write([]byte("early"))
	require.NoError(t, err)
	nothingFor(t, c, 300*time.Millisecond)
	select {
	case <-conns:
		t.Fatal("the proxy connected to the server during a partition")
	default: // ...but not connected through
	}

	p.Heal()
	s := accepted(t, conns)
	assert.Equal(t, "early", readN(t, s, 5))
	_, err = s.Write([]byte("reply"))
	require.NoError(t, err)
	assert.Equal(t, "reply", readN(t, c, 5))
}

func TestPartitionWithEcho(t *testing.T) {
	p, err := Start(echoServer(t))
	require.NoError(t, err)
	defer p.Close()
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	_, err = c.Write([]byte("one\n"))
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "one\n", line)

	p.Partition()
	_, err = c.Write([]byte("two\nthree\n"))
	require.NoError(t, err)
	nothingFor(t, c, 300*time.Millisecond)
	p.Heal()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	for _, want := range []string{"two\n", "three\n"} {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, want, line)
	}
}

func TestCutDuringPartition(t *testing.T) {
	p, err := Start(echoServer(t))
	require.NoError(t, err)
	defer p.Close()
	c := dial(t, p.Addr())
	_, err = c.Write([]byte("x"))
	require.NoError(t, err)
	assert.Equal(t, "x", readN(t, c, 1))
	p.Partition()
	_, err = c.Write([]byte("held"))
	require.NoError(t, err)
	p.Cut()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(make([]byte, 1))
	assert.Error(t, err, "a cut connection must be closed, partition or not")
	var ne net.Error
	if errors.As(err, &ne) {
		assert.False(t, ne.Timeout(), "the cut connection was left open")
	}
}

// TestCloseDuringPartition: Close returns at once though goroutines hold
// bytes and a connection waits to be connected through, and leaves no
// goroutine behind.
func TestCloseDuringPartition(t *testing.T) {
	target := echoServer(t)
	before := settledGoroutines(t, -1)

	p, err := Start(target)
	require.NoError(t, err)
	c1, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c1.Close()
	_, err = c1.Write([]byte("a"))
	require.NoError(t, err)
	assert.Equal(t, "a", readN(t, c1, 1))
	p.Partition()
	_, err = c1.Write([]byte("held"))
	require.NoError(t, err)
	c2, err := net.Dial("tcp", p.Addr()) // waits for the partition to heal
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Write([]byte("held too"))
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // let the proxy read and hold them

	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close hangs on held goroutines")
	}
	for _, c := range []net.Conn{c1, c2} {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err = c.Read(make([]byte, 1))
		assert.Error(t, err)
	}
	c1.Close()
	c2.Close()
	settledGoroutines(t, before)
}

// settledGoroutines waits until runtime.NumGoroutine is at most want (or,
// for want < 0, stops changing) and returns it; it fails t if it stays
// above want for 5s.
func settledGoroutines(t *testing.T, want int) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	last := runtime.NumGoroutine()
	for {
		time.Sleep(20 * time.Millisecond)
		n := runtime.NumGoroutine()
		if (want >= 0 && n <= want) || (want < 0 && n == last) {
			return n
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, want at most %d:\n%s", n, want, buf)
		}
		last = n
	}
}

// TestLatencyDelaysEachWay checks a lower bound only: the echo's round trip
// through a proxy with latency d takes at least 2d (the request and the
// answer each wait d), and back at zero it no longer waits.
func TestLatencyDelaysEachWay(t *testing.T) {
	p, err := Start(echoServer(t))
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func() time.Duration {
		start := time.Now()
		_, err := c.Write([]byte("ping\n"))
		require.NoError(t, err)
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ping\n", line)
		return time.Since(start)
	}
	const d = 150 * time.Millisecond
	p.SetLatency(d)
	assert.GreaterOrEqual(t, echo(), 2*d)
	p.SetLatency(0)
	// On a loaded machine a round trip may take long; it must not take
	// the 2d a latency would add to each of ten in a row.
	start := time.Now()
	for range 10 {
		echo()
	}
	assert.Less(t, time.Since(start), 20*d, "ten echoes with the latency off")
}

func TestHoldNewKeepsOldConnections(t *testing.T) {
	target, conns := acceptServer(t)
	p, err := Start(target)
	require.NoError(t, err)
	defer p.Close()
	old := dial(t, p.Addr())
	s := accepted(t, conns)

	p.HoldNew()
	c := dial(t, p.Addr()) // accepted...
	_, err = c.Write([]byte("early"))
	require.NoError(t, err)
	_, err = old.Write([]byte("still"))
	require.NoError(t, err)
	assert.Equal(t, "still", readN(t, s, 5), "a connection made before HoldNew goes on")
	nothingFor(t, c, 300*time.Millisecond)
	select {
	case <-conns:
		t.Fatal("the proxy connected a new connection to the server during HoldNew")
	default: // ...but not connected through
	}

	p.Heal()
	s2 := accepted(t, conns)
	assert.Equal(t, "early", readN(t, s2, 5))
}
