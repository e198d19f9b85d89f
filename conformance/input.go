package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// testBadInput: invalid names and options are rejected with ErrInvalidName
// and ErrInvalidOption by Acquire and TryAcquire alike, never with a panic
// and never with a lock; the Locker keeps working afterwards.
func (s *suite) testBadInput(t *testing.T) {
	l := s.locker(t)
	valid := lockName(t)

	type acquireFunc = func(context.Context, string, ...backend.Option) (*backend.Lease, error)
	calls := map[string]acquireFunc{"Acquire": l.Acquire, "TryAcquire": l.TryAcquire}
	check := func(t *testing.T, name string, opts []backend.Option, want error) {
		t.Helper()
		for call, acq := range calls {
			var ls *backend.Lease
			var err error
			require.NotPanics(t, func() { ls, err = acq(ctx(t, s.prompt), name, opts...) }, call)
			hold(t, ls)
			require.Nil(t, ls, "%s granted a lock", call)
			require.ErrorIs(t, err, want, call)
			assert.NotErrorIs(t, err, backend.ErrNotAcquired, call)
		}
	}

	t.Run("Names", func(t *testing.T) {
		for _, tc := range []struct{ what, name string }{
			{"empty", ""},
			{"too long", valid + strings.Repeat("x", backend.MaxNameLen+1-len(valid))},
			{"invalid UTF-8", valid + "\xff"},
			{"truncated UTF-8", valid + "\xe6\x97"},
			{"NUL", valid + "\x00"},
			{"newline", valid + "\n"},
			{"DEL", valid + "\x7f"},
			{"C1 control", valid + "\u0085"},
		} {
			t.Run(tc.what, func(t *testing.T) { check(t, tc.name, nil, backend.ErrInvalidName) })
		}
	})

	t.Run("Options", func(t *testing.T) {
		cases := []struct {
			what string
			opts []backend.Option
		}{
			{"zero TTL", []backend.Option{backend.WithTTL(0)}},
			{"negative TTL", []backend.Option{backend.WithTTL(-time.Second)}},
			{"negative max hold", []backend.Option{backend.WithMaxHold(-time.Second)}},
			{"negative drift", []backend.Option{backend.WithDriftMargin(-time.Millisecond)}},
			{"drift equal to TTL", []backend.Option{backend.WithTTL(s.short), backend.WithDriftMargin(s.short)}},
			{"drift over TTL", []backend.Option{backend.WithTTL(s.short), backend.WithDriftMargin(2 * s.short)}},
		}
		if s.caps.MinTTL > time.Nanosecond {
			cases = append(cases, struct {
				what string
				opts []backend.Option
			}{fmt.Sprintf("TTL under MinTTL %v", s.caps.MinTTL), []backend.Option{backend.WithTTL(s.caps.MinTTL - time.Nanosecond)}})
		}
		for _, tc := range cases {
			t.Run(tc.what, func(t *testing.T) { check(t, valid, tc.opts, backend.ErrInvalidOption) })
		}
	})

	// Nothing above took the valid name or broke the Locker.
	t.Run("StillWorks", func(t *testing.T) {
		ls := s.try(t, l, valid)
		release(t, ls)
		if s.caps.MinTTL > 0 {
			// MinTTL itself is accepted (the lease may well be lost at once).
			ls, err := l.TryAcquire(ctx(t, s.prompt), lockName(t), backend.WithTTL(s.caps.MinTTL))
			hold(t, ls)
			assert.NotErrorIs(t, err, backend.ErrInvalidOption, "TTL equal to MinTTL")
		}
	})

	t.Run("ValidNames", func(t *testing.T) {
		base := lockName(t) + "/"
		other := s.locker(t)
		for _, n := range []string{"a/b", "a/../b", "..", ".", "/", "//", "%", "%00", "%zz", " ", "日本語", "emoji-\U0001F512", "a:b*c?d", "[x]{y}", "\u200b"} {
			ls, err := l.TryAcquire(ctx(t, s.prompt), base+n)
			hold(t, ls)
			require.NoError(t, err, "name %q", base+n)
			s.requireHeld(t, other, base+n)
			release(t, ls)
		}
	})
}
