package etcd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/urltest"
)

// Open returns at its context's deadline, before dial_timeout (5s by
// default), user authentication included: clientv3.New used to dial it on
// a context of its own for the whole dial timeout.
func TestOpenHonoursContextDeadline(t *testing.T) {
	silent := urltest.NewSentinel(t).Addr()
	closed := urltest.ClosedPort(t)
	for _, raw := range []string{
		"etcd://" + silent + "/x",
		"etcd://user:pass@" + silent + "/x",
		"etcds://user:pass@" + silent + "/x",
		"etcd://" + closed + "/x",
		"etcd://user:pass@" + closed + "/x",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := urltest.OpenFails(t, ctx, raw, time.Second+500*time.Millisecond)
		cancel()
		assert.ErrorIs(t, err, backend.ErrUnavailable, raw)
		assert.ErrorIs(t, err, context.DeadlineExceeded, raw)
		assert.NotErrorIs(t, err, backend.ErrInvalidURL, raw)
		// The error names the bound it had: the context's 1s, not the
		// default dial_timeout (it said "within dial_timeout 5s").
		assert.ErrorContains(t, err, "the context's deadline (before dial_timeout 5s)", raw)
		assert.NotContains(t, err.Error(), "within dial_timeout", raw)
		urltest.NoLeak(t, err, "pass@")
	}
}

// Without a context deadline, dial_timeout bounds Open.
func TestOpenHonoursDialTimeout(t *testing.T) {
	silent := urltest.NewSentinel(t).Addr()
	for _, raw := range []string{
		"etcd://" + silent + "/x?dial_timeout=1s",
		"etcd://user:pass@" + silent + "/x?dial_timeout=1s",
		"etcd://" + urltest.ClosedPort(t) + "/x?dial_timeout=1s",
	} {
		err := urltest.OpenFails(t, context.Background(), raw, 3*time.Second)
		assert.ErrorIs(t, err, backend.ErrUnavailable, raw)
		assert.ErrorContains(t, err, "within dial_timeout 1s", raw)
	}
}

// etcds:// at the plain test server's port says TLS, well within
// dial_timeout. (etcd:// at a TLS port: TestOpenTLS.)
func TestOpenTLSAtPlainPort(t *testing.T) {
	raw := strings.Replace(srv.Endpoints()[0], "http://", "etcds://", 1) + "/x?dial_timeout=3s"
	err := urltest.OpenFails(t, context.Background(), raw, 3*time.Second+2*time.Second)
	assert.ErrorContains(t, err, "TLS")
	assert.ErrorIs(t, err, backend.ErrUnavailable)
}
