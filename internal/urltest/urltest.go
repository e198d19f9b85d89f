// Package urltest checks how backend.Open refuses bad URLs: with an error
// matching backend.ErrInvalidURL that says why, before any connection to
// the server, fast, and without the URL's password in any form of the
// error.
package urltest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// Secret is the password the bad URLs of the tests carry; no error may
// contain it.
const Secret = "s3cr3t-pw"

// Bad is a URL that Open must refuse ([0]) and what its error must say
// ([1]).
type Bad [2]string

// ParseBound is how soon a URL that fails before any dial must fail: far
// more than it needs, for busy CI machines; a dial would take longer (the
// Sentinel never answers).
const ParseBound = time.Second

// Sentinel is a listener that counts the connections it accepts and never
// answers them: bad URLs point at it, and a connection means Open dialed
// before refusing the URL.
type Sentinel struct {
	ln       net.Listener
	accepted atomic.Int64
}

// NewSentinel starts a Sentinel on 127.0.0.1, closed at tb's cleanup.
func NewSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	s := &Sentinel{ln: ln}
	conns := make(chan net.Conn, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			select {
			case conns <- c:
			default:
				_ = c.Close()
			}
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	return s
}

// Addr is the Sentinel's host:port.
func (s *Sentinel) Addr() string { return s.ln.Addr().String() }

// Port is the Sentinel's port.
func (s *Sentinel) Port() string {
	_, p, _ := net.SplitHostPort(s.Addr())
	return p
}

// Accepted is the number of connections accepted so far.
func (s *Sentinel) Accepted() int64 { return s.accepted.Load() }

// RequireRefused opens each case's URL (with a context of 30s, which no
// case should come near) and checks that Open fails within ParseBound,
// with an error matching backend.ErrInvalidURL that contains Want,
// without a connection to s (nil: not checked) and without Secret in any
// form of the error (NoLeak).
func RequireRefused(t *testing.T, s *Sentinel, cases []Bad) {
	t.Helper()
	for _, tc := range cases {
		raw, want := tc[0], tc[1]
		t.Run(strings.ReplaceAll(raw, "/", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var before int64
			if s != nil {
				before = s.Accepted()
			}
			start := time.Now()
			l, err := backend.Open(ctx, raw)
			took := time.Since(start)
			if err == nil {
				_ = l.Close()
				t.Fatalf("%s opened", raw)
			}
			require.ErrorIs(t, err, backend.ErrInvalidURL, raw)
			assert.Contains(t, err.Error(), want, raw)
			assert.Less(t, took, ParseBound, "%s: refused after %v: it must fail before any dial", raw, took)
			if s != nil {
				assert.Equal(t, before, s.Accepted(), "%s: Open connected before refusing the URL", raw)
			}
			NoLeak(t, err, Secret)
		})
	}
}

// NoLeak checks that secret appears in no form of err: %v, %+v, %#v, %q,
// and every error of its Unwrap chain (Join's included).
func NoLeak(t *testing.T, err error, secret string) {
	t.Helper()
	seen := 0
	var walk func(e error)
	walk = func(e error) {
		if e == nil || seen > 100 {
			return
		}
		seen++
		for _, verb := range []string{"%v", "%+v", "%#v", "%q", "%s"} {
			if s := fmt.Sprintf(verb, e); strings.Contains(s, secret) {
				t.Errorf("the password is in the error (%s of %T): %s", verb, e, s)
				return
			}
		}
		if u, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range u.Unwrap() {
				walk(e)
			}
			return
		}
		walk(errors.Unwrap(e))
	}
	walk(err)
}

// ClosedPort returns a 127.0.0.1 address nothing listens on until tb
// ends: a TCP socket bound to it and never listening, so that a
// connection is refused and no other process can take the port meanwhile
// (a port merely closed again was taken by another test's listener in a
// busy quick-tier run, and its EOF was not the refusal the test wanted).
func ClosedPort(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	require.NoError(tb, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	require.NoError(tb, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// OpenFails opens rawURL with ctx, checks that Open fails within bound,
// and returns its error (a Locker that opens is closed and fails the
// test).
func OpenFails(t *testing.T, ctx context.Context, rawURL string, bound time.Duration) error {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		l, err := backend.Open(ctx, rawURL)
		if err == nil {
			_ = l.Close()
			err = errors.New("opened")
		}
		done <- err
	}()
	select {
	case err := <-done:
		took := time.Since(start)
		t.Logf("%s: after %v: %v", rawURL, took, err)
		require.Error(t, err)
		require.NotEqual(t, "opened", err.Error(), "%s opened", rawURL)
		assert.Less(t, took, bound, "%s: Open took %v", rawURL, took)
		return err
	case <-time.After(bound + 30*time.Second):
		t.Fatalf("%s: Open still waits after %v", rawURL, bound+30*time.Second)
		return nil
	}
}
