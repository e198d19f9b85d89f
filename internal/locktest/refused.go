package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// Refusal is a valid URL that must not get a working Locker, such as a TLS
// URL without the CA or the client certificate the server wants.
type Refusal struct {
	Name  string        // the subtest's name
	URL   string        // the URL to open
	Want  string        // what the error says (empty: anything)
	Bound time.Duration // how soon it must fail
}

// Refused runs attempt on each case's URL in a subtest, with a context that
// ends after timeout, and checks that it fails within the case's Bound
// with an error that contains Want and is neither ErrInvalidURL (the URL is
// valid) nor ErrNotAcquired (nobody holds the lock): the server refused.
func Refused(t *testing.T, timeout time.Duration, cases []Refusal, attempt func(t *testing.T, ctx context.Context, rawURL string) error) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			err := attempt(t, ctx, tc.URL)
			took := time.Since(start)
			t.Logf("after %v: %v", took, err)
			require.Error(t, err)
			assert.NotErrorIs(t, err, backend.ErrInvalidURL)
			assert.NotErrorIs(t, err, backend.ErrNotAcquired)
			assert.Contains(t, err.Error(), tc.Want)
			assert.Less(t, took, tc.Bound)
		})
	}
}

// OpenErr is an attempt for Refused that fails in Open: it opens rawURL and
// closes the Locker if that succeeded, returning Open's error.
func OpenErr(_ *testing.T, ctx context.Context, rawURL string) error {
	l, err := backend.Open(ctx, rawURL)
	if err == nil {
		_ = l.Close()
	}
	return err
}
