package backend_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/backend/mem"
)

func TestOpenRejectsBadURLs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, mention string }{
		{"nosuch://x", `"nosuch"`},
		{"nosuch://x", "mem"}, // lists the known schemes
		{"mem://?tll=1s", `"tll"`},
		{"mem://?tll=1s", "ttl"}, // lists the known parameters
		{"mem://?ttl=ten", "ttl"},
		{"mem://?auto_renew=maybe", "auto_renew"},
		{"mem://?max_hold=-", "max_hold"},
		{"::not a url", "missing protocol scheme"},
	} {
		_, err := backend.Open(ctx, tc.url)
		require.ErrorIsf(t, err, backend.ErrInvalidURL, "%s", tc.url)
		assert.Containsf(t, err.Error(), tc.mention, "%s", tc.url)
	}
}

func TestOpenRejectsBadOptionValues(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"mem://?ttl=0s", "mem://?ttl=-1s", "mem://?ttl=1ms", "mem://?ttl=1s&drift=1s", "mem://?max_hold=-1s"} {
		_, err := backend.Open(ctx, u)
		assert.ErrorIsf(t, err, backend.ErrInvalidOption, "%s", u)
	}
}

func TestOpenAppliesCommonParams(t *testing.T) {
	ctx := context.Background()
	l, err := backend.Open(ctx, "mem://url-params?ttl=250ms&holder=me&auto_renew=false")
	require.NoError(t, err)
	defer l.Close()
	lease, err := l.Acquire(ctx, "x")
	require.NoError(t, err)
	assert.Equal(t, 250*time.Millisecond, lease.TTL())
	assert.Equal(t, "me", lease.Holder())
	select { // auto_renew=false: the lease is lost at its deadline
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease with auto_renew=false was not lost")
	}
	assert.ErrorIs(t, lease.Err(), backend.ErrLeaseLost)

	// An Acquire option overrides the URL default.
	lease2, err := l.Acquire(ctx, "y", backend.WithTTL(time.Second), backend.WithAutoRenew(true))
	require.NoError(t, err)
	assert.Equal(t, time.Second, lease2.TTL())
	require.NoError(t, lease2.Release(ctx))
}

func TestSchemesListsRegistered(t *testing.T) {
	assert.Contains(t, backend.Schemes(), "mem")
}
