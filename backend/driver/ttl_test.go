package driver_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fencelock/fencelock/backend/driver"
)

// TestTTLLimitsCheck: Check refuses a TTL that is not positive, under Min,
// not whole in Granularity or over Max, saying which, and takes the rest.
func TestTTLLimitsCheck(t *testing.T) {
	etcd := driver.TTLLimits{Min: time.Second, Granularity: time.Second, ServerDefaultMin: 2 * time.Second, Counted: "etcd lease TTLs"}
	zk := driver.TTLLimits{Min: 400 * time.Millisecond, Granularity: time.Millisecond, Max: time.Hour, Counted: "ZooKeeper session timeouts"}
	odd := driver.TTLLimits{Granularity: 250 * time.Millisecond}
	for _, tc := range []struct {
		name string
		lim  driver.TTLLimits
		ttl  time.Duration
		want string // "" for nil
	}{
		{"zero", etcd, 0, "TTL must be positive, got 0s"},
		{"negative", zk, -time.Second, "TTL must be positive, got -1s"},
		{"negative, no limits", driver.TTLLimits{}, -1, "TTL must be positive, got -1ns"},
		{"under min", etcd, 500 * time.Millisecond, "TTL 500ms is under the minimum of 1s"},
		{"min", etcd, time.Second, ""},
		{"under the server's default min", etcd, time.Second, ""},
		{"not whole seconds", etcd, 1500 * time.Millisecond, "etcd lease TTLs are whole seconds, got 1.5s"},
		{"whole seconds", etcd, 3 * time.Second, ""},
		{"not whole milliseconds", zk, 400500 * time.Microsecond, "ZooKeeper session timeouts are whole milliseconds, got 400.5ms"},
		{"max", zk, time.Hour, ""},
		{"over max", zk, time.Hour + time.Millisecond, "ZooKeeper session timeouts are at most 1h0m0s, got 1h0m0.001s"},
		{"other unit", odd, 300 * time.Millisecond, "TTLs are whole multiples of 250ms, got 300ms"},
		{"no limits", driver.TTLLimits{}, time.Nanosecond, ""},
	} {
		err := tc.lim.Check(tc.ttl)
		if tc.want == "" {
			assert.NoError(t, err, tc.name)
		} else {
			assert.EqualError(t, err, tc.want, tc.name)
		}
	}
}

// TestTTLLimitsDerived: Capabilities, Limits and Suite take their TTL
// fields from the limits and keep the rest.
func TestTTLLimitsDerived(t *testing.T) {
	l := driver.TTLLimits{Min: time.Second, Granularity: time.Second, ServerDefaultMin: 2 * time.Second}
	c := l.Capabilities(driver.Capabilities{Name: "etcd", LockDelay: true})
	assert.Equal(t, driver.Capabilities{Name: "etcd", MinTTL: time.Second, DefaultServerMinTTL: 2 * time.Second, LockDelay: true}, c)
	lim := l.Limits(driver.Limits{DefaultTTL: 5 * time.Second, LockDelay: true})
	assert.Equal(t, time.Second, lim.MinTTL)
	assert.Equal(t, 5*time.Second, lim.DefaultTTL)
	assert.True(t, lim.LockDelay)
	assert.Error(t, lim.CheckTTL(1500*time.Millisecond))
	assert.NoError(t, lim.CheckTTL(2*time.Second))
	p := l.Suite(driver.SuiteProfile{FIFO: true, TTL: 2 * time.Second})
	assert.Equal(t, driver.SuiteProfile{FIFO: true, TTL: 2 * time.Second, MinTTL: 2 * time.Second}, p)
	assert.Equal(t, 100*time.Millisecond, driver.TTLLimits{Min: 100 * time.Millisecond}.Suite(driver.SuiteProfile{}).MinTTL)
}
