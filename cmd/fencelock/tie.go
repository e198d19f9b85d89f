package main

import (
	"os/exec"
	"runtime"
)

// startTied starts cmd so that it does not outlive fencelock where the
// system allows it (Linux: the kernel sends it SIGKILL when fencelock
// dies, even by SIGKILL; see tieAttr), and waits for it: the channel gets
// cmd.Wait's error once it has exited (cmd.ProcessState is then set).
//
// Linux sends the parent-death signal when the thread that started the
// child ends, not the process, and Go ends a thread when a goroutine
// locked to it exits. So the goroutine that starts the child keeps its
// thread locked, and to itself, until the child has been waited for:
// nothing else runs on that thread, and it cannot end before.
func startTied(cmd *exec.Cmd) (<-chan error, error) {
	cmd.SysProcAttr = tieAttr(cmd.SysProcAttr)
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}
