package fencing

import (
	"errors"
	"fmt"
	"strconv"
)

// Token is a fencing token: a positive integer granted with every acquisition
// of a lock.
//
// Guarantee: a token is strictly greater than every token granted before it
// for the same lock name on the same cluster (etcd: the lock key's create
// revision; ZooKeeper: the lock node's czxid; Redis: a per-lock INCR counter;
// mem: a per-server counter). Tokens of different lock names or clusters are
// not comparable. The zero Token is never granted and means "no token".
type Token uint64

// ErrInvalidToken is returned by ParseToken for anything that is not the
// decimal string form of a granted (non-zero) token.
var ErrInvalidToken = errors.New("fencing: invalid token")

// String returns the decimal form used in headers and environment variables.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// MarshalText implements encoding.TextMarshaler with the String form.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseToken's rules.
func (t *Token) UnmarshalText(b []byte) error {
	v, err := ParseToken(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ParseToken parses the String form of a token: plain decimal digits, no sign,
// no spaces, no leading zeros, not zero, at most 2^64-1.
func ParseToken(s string) (Token, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: %q is not a decimal number", ErrInvalidToken, s)
		}
	}
	if s[0] == '0' {
		return 0, fmt.Errorf("%w: %q (zero or a leading zero)", ErrInvalidToken, s)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is out of range", ErrInvalidToken, s)
	}
	return Token(v), nil
}
