package mem_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/mem"
)

// A nil connection is refused at once, as every adapter refuses a nil
// client, rather than panicking at the first acquisition.
func TestNewNilConn(t *testing.T) {
	l, err := mem.New(nil)
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	require.Nil(t, l)
}
