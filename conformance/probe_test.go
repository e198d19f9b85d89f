package conformance_test

import (
	"context"
	"flag"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/freeport"
)

// TestURLCapabilitiesUnreachable: a backend nobody listens at is reported
// in seconds, with one line naming the host and the error, matching
// backend.ErrUnavailable.
func TestURLCapabilitiesUnreachable(t *testing.T) {
	port, err := freeport.Port()
	require.NoError(t, err)
	host := "127.0.0.1:" + strconv.Itoa(port)
	for _, u := range []string{"etcd://" + host + "/x", "zk://" + host + "/x", "redis://" + host + "/0", "etcd://" + host + "," + host + "/x"} {
		t.Run(strings.SplitN(u, ":", 2)[0], func(t *testing.T) {
			start := time.Now()
			_, err := conformance.URLCapabilities(context.Background(), u)
			assert.Less(t, time.Since(start), 15*time.Second)
			require.ErrorIs(t, err, backend.ErrUnavailable)
			assert.NotContains(t, err.Error(), "\n")
			assert.Contains(t, err.Error(), "dial tcp "+host)
		})
	}
}

// TestURLCapabilitiesInvalid: a URL the harness cannot use is refused
// before anything is dialled, and one that Open refuses (an unknown
// parameter, here with a host that accepts connections) is reported as
// invalid, not as unavailable.
func TestURLCapabilitiesInvalid(t *testing.T) {
	for _, u := range []string{"etcd://127.0.0.1/x", "nosuch://127.0.0.1:1/x", "::"} {
		_, err := conformance.URLCapabilities(context.Background(), u)
		assert.ErrorIs(t, err, backend.ErrInvalidURL, u)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, err = conformance.URLCapabilities(context.Background(), "redis://"+ln.Addr().String()+"/0?nosuch=1")
	assert.ErrorIs(t, err, backend.ErrInvalidURL)
	assert.NotErrorIs(t, err, backend.ErrUnavailable)

	// With nothing listening, a bad URL is still reported as bad: checked
	// before the hosts are dialled.
	port, err := freeport.Port()
	require.NoError(t, err)
	host := "127.0.0.1:" + strconv.Itoa(port)
	for _, u := range []string{"redis://" + host + "/0?nosuch=1", "etcd://" + host + "/x?dial_timeout=-1s",
		"zk://" + host + "/x?ttl=-1s", "redis://" + host + "/0?pool_size=0"} {
		_, err := conformance.URLCapabilities(context.Background(), u)
		assert.ErrorIs(t, err, backend.ErrInvalidURL, u)
		assert.NotErrorIs(t, err, backend.ErrUnavailable, u)
	}
}

// TestCheckURL: CheckURL finds what Open finds before it dials, for every
// scheme in this module, and dials nothing.
func TestCheckURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	host := ln.Addr().String()
	for _, u := range []string{"etcd://" + host + "/x", "etcds://" + host + "/x", "zk://" + host + "/x?ttl=4s",
		"zks://" + host + "/x", "redis://" + host + "/0", "rediss://" + host + "/0", "mem://check"} {
		assert.NoError(t, backend.CheckURL(u), u)
	}
	for _, u := range []string{"etcd://" + host + "/x?ttl=1500ms", "etcd://" + host + "/x?cacert=/nonexistent",
		"zk://" + host + "/x?ttl=1s&session_timeout=2s", "zk://" + host + "/x?dial_timeout=0s",
		"redis://" + host + "/0?protocol=4", "redis://" + host + "/-1", "mem://a:1", "redis://" + host + "/0?ttl=1s&ttl=2s"} {
		assert.ErrorIs(t, backend.CheckURL(u), backend.ErrInvalidURL, u)
	}
	select {
	case <-accepted:
		t.Fatal("CheckURL connected to the server")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestCapabilityFlags: only the flags given replace a capability, -fifo=false
// included.
func TestCapabilityFlags(t *testing.T) {
	declared := conformance.Capabilities{FIFO: true, TTL: 2 * time.Second, MinTTL: 100 * time.Millisecond, MaxTTL: time.Minute}
	for _, tc := range []struct {
		args []string
		want conformance.Capabilities
	}{
		{nil, declared},
		{[]string{"-x.ttl", "4s"}, conformance.Capabilities{FIFO: true, TTL: 4 * time.Second, MinTTL: 100 * time.Millisecond, MaxTTL: time.Minute}},
		{[]string{"-x.fifo=false", "-x.min-ttl", "0", "-x.max-ttl=0s"}, conformance.Capabilities{TTL: 2 * time.Second}},
		{[]string{"-x.fifo"}, declared},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		apply := conformance.CapabilityFlags(fs, "x.")
		require.NoError(t, fs.Parse(tc.args))
		got := declared
		apply(&got)
		assert.Equal(t, tc.want, got, strings.Join(tc.args, " "))
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	conformance.CapabilityFlags(fs, "")
	assert.Error(t, fs.Parse([]string{"-ttl", "soon"}))
}
