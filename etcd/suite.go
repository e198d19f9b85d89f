package etcd

import (
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// suiteProfile is the etcd and etcds schemes' declaration for the
// conformance suite (driver.Scheme.Suite). Its MinTTL is 2s, the minimum
// lease TTL of a server with the default election settings (heartbeat
// 100ms, election 1s: ttlLimits.ServerDefaultMin); shorter TTLs are
// refused with ErrInvalidOption, by the adapter under 1s, by the server
// above. A cluster tuned otherwise needs the suite's -ttl and -min-ttl
// flags.
var suiteProfile = ttlLimits.Suite(driver.SuiteProfile{FIFO: true, TTL: 2 * time.Second, LockDelay: true})
