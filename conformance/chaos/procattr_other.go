//go:build !linux

package chaos

import "syscall"

// workerAttr is nil where there is no parent-death signal: a campaign
// that is killed leaves its workers behind.
func workerAttr() *syscall.SysProcAttr { return nil }
