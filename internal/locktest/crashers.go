package locktest

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// Crashers remembers, for a conformance harness, how to crash each Locker
// it made (close its client, kill its proxy). The zero value is ready.
type Crashers struct {
	mu sync.Mutex
	m  map[*backend.Locker]func() error
}

// Add records crash for l until t ends.
func (c *Crashers) Add(t testing.TB, l *backend.Locker, crash func() error) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[*backend.Locker]func() error)
	}
	c.m[l] = crash
	c.mu.Unlock()
	t.Cleanup(func() {
		c.mu.Lock()
		delete(c.m, l)
		c.mu.Unlock()
	})
}

// Crash runs l's crash, failing t if l was not added or the crash fails.
func (c *Crashers) Crash(t testing.TB, l *backend.Locker) {
	t.Helper()
	c.mu.Lock()
	crash := c.m[l]
	c.mu.Unlock()
	require.NotNil(t, crash, "Crash of a Locker this harness did not make")
	require.NoError(t, crash())
}
