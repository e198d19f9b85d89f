//go:build !linux

package main

import "syscall"

// tieAttr returns attr unchanged: without a parent-death signal, a
// command outlives a fencelock that is killed with SIGKILL.
func tieAttr(attr *syscall.SysProcAttr) *syscall.SysProcAttr { return attr }
