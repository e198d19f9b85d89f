package main

import "syscall"

// tieAttr returns attr (a new one if nil) with SIGKILL as the parent-death
// signal: the kernel kills the child when the thread that started it ends
// (see startTied), fencelock's death included. It is not inherited by
// the child's own children, and is cleared when the child executes a
// set-user-ID or set-group-ID program.
func tieAttr(attr *syscall.SysProcAttr) *syscall.SysProcAttr {
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Pdeathsig = syscall.SIGKILL
	return attr
}
