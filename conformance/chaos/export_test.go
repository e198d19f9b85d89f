package chaos

import "testing"

// AllowInProcess lets the planted-bug test run a campaign over mem://,
// until t ends: a test that runs after it must find mem:// refused again.
// Sequential tests only (the variable is the package's).
func AllowInProcess(t testing.TB) {
	allowInProcess = true
	t.Cleanup(func() { allowInProcess = false })
}
