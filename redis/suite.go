package redis

import (
	"time"

	"github.com/fencelock/fencelock/backend"
)

// suiteProfile is the redis and rediss schemes' declaration for the
// conformance suite (backend.Scheme.Suite).
var suiteProfile = backend.SuiteProfile{FIFO: true, TTL: 500 * time.Millisecond, MinTTL: MinTTL}
