//go:build !linux

package main

import (
	"syscall"
	"time"
)

// watchdog stands for the Linux watchdog (watchdog_linux.go), which is not
// built here: the command runs in fencelock's process group, and nothing
// stops it at the deadline while fencelock is stopped.
type watchdog struct{}

// startWatchdog starts nothing.
func startWatchdog() (*watchdog, error) { return &watchdog{}, nil }

// attr leaves the command in fencelock's process group.
func (*watchdog) attr() *syscall.SysProcAttr { return nil }

// started has nobody to tell.
func (*watchdog) started(int) error { return nil }

// extend has no deadline to move.
func (*watchdog) extend(time.Time) error { return nil }

// leaves has nobody to tell: the directory stays if fencelock dies.
func (*watchdog) leaves(string) error { return nil }

// killRest has no group to kill: the command's children are its own.
func (*watchdog) killRest() {}

// finish reports that nothing was killed.
func (*watchdog) finish() bool { return false }

// runWatchdogIfAsked: no watchdog runs here.
func runWatchdogIfAsked() {}
