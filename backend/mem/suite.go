package mem

import (
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// suiteProfile is the mem scheme's declaration for the conformance suite
// (driver.Scheme.Suite). The server is in the process, so a short TTL
// holds: no network between a renewal and the server.
var suiteProfile = ttlLimits.Suite(driver.SuiteProfile{FIFO: true, TTL: 300 * time.Millisecond, LockDelay: true})
