package backend

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the longest lock name accepted, in bytes.
const MaxNameLen = 256

// ValidateName reports whether name is a valid lock name: 1 to MaxNameLen
// bytes of valid UTF-8 with no control characters (NUL included). Any other
// byte is allowed; adapters escape names so that no name can reach outside
// its own place under the backend's prefix.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, the maximum is %d", ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %q contains control character %U", ErrInvalidName, name, r)
		}
	}
	return nil
}
