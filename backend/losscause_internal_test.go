package backend

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLossEndingNamesTheRootCause: a lease's loss is counted under the
// cause that explains it when its error matches several (a client closed
// under a ZooKeeper Locker ends the session too; the max hold stops the
// renewals whose absence then looks like a deadline).
func TestLossEndingNamesTheRootCause(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: %w", ErrClientClosed, ErrSessionLost), "client_closed"},
		{fmt.Errorf("%w: renewal: %w", ErrDeadline, ErrClientClosed), "client_closed"},
		{fmt.Errorf("%w: %w", ErrMaxHold, ErrDeadline), "max_hold"},
		{fmt.Errorf("%w: %w", ErrDeadline, ErrUnavailable), "deadline"},
		{ErrSessionLost, "session_lost"},
		{ErrRevoked, "revoked"},
		{ErrDeleted, "deleted"},
		{ErrExpired, "expired"},
		{ErrLeaseLost, "backend"},
	} {
		assert.Equal(t, c.want, lossCauses[lossEnding(c.err)], "%v", c.err)
	}
}
