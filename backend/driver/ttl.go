package driver

import (
	"fmt"
	"time"
)

// TTLLimits are the TTLs an adapter accepts, declared once per adapter:
// its Capabilities (TTLLimits.Capabilities), the Limits of its URLs
// (TTLLimits.Limits), its SuiteProfile's MinTTL (TTLLimits.Suite) and its
// Driver's CheckTTL (TTLLimits.Check) derive from that one value, so that
// they cannot disagree.
type TTLLimits struct {
	// Min is the shortest TTL the adapter accepts (Capabilities.MinTTL):
	// package backend refuses shorter ones before calling the driver.
	Min time.Duration
	// Granularity, if not zero, is the unit the backend counts TTLs in: a
	// TTL must be a whole multiple of it (etcd: 1s; Redis, PostgreSQL and
	// ZooKeeper: 1ms).
	Granularity time.Duration
	// ServerDefaultMin, if more than Min, is the shortest TTL a server with
	// default settings grants (Capabilities.DefaultServerMinTTL): etcd 2s
	// (1.5 times its default election timeout of 1s, in whole seconds),
	// ZooKeeper 4s (its default minSessionTimeout, 2 times tickTime). Zero
	// if it is Min.
	ServerDefaultMin time.Duration
	// Max, if not zero, is the longest TTL the adapter can ask for
	// (ZooKeeper: a session timeout is an int32 of milliseconds).
	Max time.Duration
	// Counted names what the backend counts in Granularity, for Check's
	// errors: "etcd lease TTLs", "redis expiries". Empty: "TTLs".
	Counted string
}

// Check reports why the adapter cannot take ttl, or nil: it is not
// positive, under Min, not a whole multiple of Granularity, or over Max.
// It sends nothing, and knows nothing of a server's own bounds
// (ServerDefaultMin is advice, not a limit).
func (l TTLLimits) Check(ttl time.Duration) error {
	counted := l.Counted
	if counted == "" {
		counted = "TTLs"
	}
	switch {
	case ttl <= 0:
		return fmt.Errorf("TTL must be positive, got %v", ttl)
	case ttl < l.Min:
		return fmt.Errorf("TTL %v is under the minimum of %v", ttl, l.Min)
	case l.Granularity > 0 && ttl%l.Granularity != 0:
		return fmt.Errorf("%s are %s, got %v", counted, unitOf(l.Granularity), ttl)
	case l.Max > 0 && ttl > l.Max:
		return fmt.Errorf("%s are at most %v, got %v", counted, l.Max, ttl)
	}
	return nil
}

// unitOf says what a whole multiple of g is called.
func unitOf(g time.Duration) string {
	switch g {
	case time.Second:
		return "whole seconds"
	case time.Millisecond:
		return "whole milliseconds"
	case time.Microsecond:
		return "whole microseconds"
	}
	return "whole multiples of " + g.String()
}

// Capabilities returns c with the fields l declares set: MinTTL and
// DefaultServerMinTTL.
func (l TTLLimits) Capabilities(c Capabilities) Capabilities {
	c.MinTTL, c.DefaultServerMinTTL = l.Min, l.ServerDefaultMin
	return c
}

// Limits returns lim with the fields l declares set: MinTTL, and CheckTTL
// as Check.
func (l TTLLimits) Limits(lim Limits) Limits {
	lim.MinTTL, lim.CheckTTL = l.Min, l.Check
	return lim
}

// Suite returns p with its MinTTL set to the shortest TTL a server with
// default settings takes: the larger of Min and ServerDefaultMin (the
// suite's servers run with default settings; a tuned one needs the
// suite's -min-ttl flag).
func (l TTLLimits) Suite(p SuiteProfile) SuiteProfile {
	p.MinTTL = max(l.Min, l.ServerDefaultMin)
	return p
}
