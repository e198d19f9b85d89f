//go:build unix

package lockbench

import (
	"syscall"
	"time"
)

// processUsage returns the CPU time (user and system) this process has
// used and the voluntary context switches it made (a thread that blocked:
// waiting for a reply, or idle), and whether the system reports them.
func processUsage() (cpu time.Duration, vcsw int64, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), int64(ru.Nvcsw), true
}
