package etcd

import (
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// suiteProfile is the etcd and etcds schemes' declaration for the
// conformance suite (driver.Scheme.Suite). 2s is the minimum lease TTL of
// a server with the default election settings (heartbeat 100ms, election
// 1s); shorter TTLs are refused with ErrInvalidOption. A cluster tuned
// otherwise needs the suite's -ttl and -min-ttl flags.
var suiteProfile = driver.SuiteProfile{FIFO: true, TTL: 2 * time.Second, MinTTL: 2 * time.Second, LockDelay: true}
