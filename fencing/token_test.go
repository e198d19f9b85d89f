package fencing_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
)

func TestParseTokenRoundTrip(t *testing.T) {
	for _, tok := range []fencing.Token{1, 42, 1 << 40, ^fencing.Token(0)} {
		got, err := fencing.ParseToken(tok.String())
		require.NoError(t, err)
		assert.Equal(t, tok, got)

		text, err := tok.MarshalText()
		require.NoError(t, err)
		var back fencing.Token
		require.NoError(t, back.UnmarshalText(text))
		assert.Equal(t, tok, back)
	}
}

func TestParseTokenRejects(t *testing.T) {
	for _, s := range []string{"", "0", "007", "-1", "+1", " 1", "1 ", "1e3", "0x10", "18446744073709551616", "abc"} {
		_, err := fencing.ParseToken(s)
		assert.Truef(t, errors.Is(err, fencing.ErrInvalidToken), "ParseToken(%q) = %v, want ErrInvalidToken", s, err)
	}
	var tok fencing.Token
	assert.ErrorIs(t, tok.UnmarshalText([]byte("x")), fencing.ErrInvalidToken)
}
