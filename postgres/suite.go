package postgres

import (
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// suiteProfile is the postgres and postgresql schemes' declaration for the
// conformance suite (driver.Scheme.Suite): waiters are granted in FIFO
// order (the queue's sequence), and a 2s TTL, as for Redis and etcd, holds
// on a loaded two-core machine under the race detector, where a renewal's
// round trip can take several hundred milliseconds. MinTTL is used by one
// case only, which checks that a TTL under it is refused.
var suiteProfile = ttlLimits.Suite(driver.SuiteProfile{FIFO: true, TTL: 2 * time.Second, LockDelay: true})
