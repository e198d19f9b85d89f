package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The checker must catch what it is there to catch.
func TestCheckHistory(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ok := []holdRecord{
		{"b", 5, at(10), at(20)},
		{"a", 3, at(0), at(10)},
		{"c", 9, at(20), at(21)},
	}
	assert.Empty(t, checkHistory(ok))

	cases := map[string][]holdRecord{
		"overlap":        {{"a", 3, at(0), at(11)}, {"b", 5, at(10), at(20)}},
		"token regress":  {{"a", 5, at(0), at(10)}, {"b", 3, at(10), at(20)}},
		"token repeated": {{"a", 5, at(0), at(10)}, {"b", 5, at(10), at(20)}},
		"zero token":     {{"a", 0, at(0), at(10)}},
		"inverted hold":  {{"a", 1, at(10), at(0)}},
	}
	for name, holds := range cases {
		assert.NotEmpty(t, checkHistory(holds), name)
	}
}
