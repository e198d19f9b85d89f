package backend_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fencelock/fencelock/backend"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "jobs/nightly", "a/../b", "..", "%2F", "ünïcødé", "with space", strings.Repeat("x", backend.MaxNameLen)} {
		assert.NoErrorf(t, backend.ValidateName(ok), "%q", ok)
	}
	for _, bad := range []string{"", strings.Repeat("x", backend.MaxNameLen+1), "nul\x00", "tab\there", "nl\n", "\xff\xfe", "del\x7f"} {
		assert.ErrorIsf(t, backend.ValidateName(bad), backend.ErrInvalidName, "%q", bad)
	}
}
