package chaos

import "syscall"

// workerAttr makes a worker die with the campaign's process (SIGKILL when
// it exits), so that none is left behind, stopped or running, if the
// campaign is killed.
func workerAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
