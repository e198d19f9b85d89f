package zookeeper

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// suiteTTL is the short TTL the conformance suite gives ZooKeeper leases
// meant to expire, when the server grants it: as for etcd, 2s holds on a
// loaded machine.
const suiteTTL = 2 * time.Second

// suiteMaxAsk is the session timeout the probe asks for to learn the
// server's maxSessionTimeout: longer than any the suite uses.
const suiteMaxAsk = time.Hour

// probeSuite is the zk and zks schemes' declaration for the conformance
// suite (driver.Scheme.Suite). A lease's TTL is its session timeout, which
// the server clamps to [minSessionTimeout, maxSessionTimeout] (by default 2
// and 20 ticks: 4s to 40s with Debian's tickTime of 2s), and the adapter
// refuses a TTL the server does not grant as asked. So the profile is read
// from the server: it opens a session asking for MinTTL and one asking for
// an hour, and the timeouts granted are the profile's MinTTL and MaxTTL;
// its TTL is 2s, or the server's minimum if that is longer.
func probeSuite(ctx context.Context, u *url.URL) (driver.SuiteProfile, error) {
	cfg, err := parseURL(u)
	if err != nil {
		return driver.SuiteProfile{}, err
	}
	d := newDriver("/", nil)
	d.cfg = cfg
	granted := func(ask time.Duration) (time.Duration, error) {
		s, err := d.dial(ctx, ask, true)
		if err != nil {
			return 0, fmt.Errorf("zookeeper: reading the session timeouts the server grants: %w", err)
		}
		defer s.close()
		return s.timeout(), nil
	}
	lo, err := granted(ttlLimits.Min)
	if err != nil {
		return driver.SuiteProfile{}, err
	}
	hi, err := granted(suiteMaxAsk)
	if err != nil {
		return driver.SuiteProfile{}, err
	}
	return driver.SuiteProfile{FIFO: true, TTL: min(max(suiteTTL, lo), hi), MinTTL: lo, MaxTTL: hi, LockDelay: true}, nil
}
