//go:build !unix

package lockbench

import "time"

// processUsage reports nothing where getrusage is not available.
func processUsage() (cpu time.Duration, vcsw int64, ok bool) { return 0, 0, false }
