//go:build !linux

package main

import "testing"

// testStoppedOn is Linux's (stopped_linux_test.go): only there does a
// watchdog stop the command of a stopped fencelock.
func testStoppedOn(t *testing.T, _ string) { t.Skip("no watchdog on this system") }
