package redis

import (
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// suiteProfile is the redis and rediss schemes' declaration for the
// conformance suite (driver.Scheme.Suite).
//
// Redis itself would honour TTLs down to MinTTL, but the suite's expiring
// leases renew (or are refreshed) every third of their TTL or so, and on a
// loaded machine (two shared cores, the race detector) a renewal's round
// trip can take several hundred milliseconds: with a 500ms TTL, runs lost
// auto-renewed leases in the AutoRenew and Deadline cases ("no renewal
// succeeded before the local deadline"). 2s, as for etcd, leaves a second
// and more of slack. MinTTL is used by one case only, which checks that a
// TTL under it is refused and that MinTTL itself is accepted, without
// holding such a lease.
var suiteProfile = ttlLimits.Suite(driver.SuiteProfile{FIFO: true, TTL: 2 * time.Second, LockDelay: true})
