package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/redistest"
)

// check runs the service on url and scrapes /metrics until every
// instrument docs/observability.md's dashboards use has a series with the attributes
// its queries group by: waits and holds per lock name, renewals and their
// headroom, a loss with cause expired, stale and accepted guard decisions
// of kind memory, held leases and waiters.
func check(t *testing.T, url, backendName string) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, Config{URL: url, MetricsAddr: "127.0.0.1:0", Workers: 4, MaxHold: 600 * time.Millisecond,
		StragglerTTL: 300 * time.Millisecond, Every: 500 * time.Millisecond})
	require.NoError(t, err)
	defer func() { cancel(); assert.NoError(t, s.Wait()) }()

	b := `fencelock_backend="` + backendName + `"`
	want := []string{
		`fencelock_acquire_duration_seconds_bucket\{fencelock_acquire_result="granted",fencelock_acquire_wait="true",` + b + `,fencelock_lock_name="orders",[^}]*le="0.1"\}`,
		`fencelock_hold_duration_seconds_bucket\{` + b + `,fencelock_lock_name="billing",`,
		`fencelock_renewals_total\{` + b + `,fencelock_lock_name="[a-z]+",fencelock_renewal_result="ok",`,
		`fencelock_renewal_headroom_seconds_bucket\{` + b + `,`,
		`fencelock_losses_total\{` + b + `,fencelock_lock_name="reports",fencelock_loss_cause="expired",`,
		`fencelock_guard_decisions_total\{fencelock_guard_decision="accepted",fencelock_guard_kind="memory",`,
		`fencelock_guard_decisions_total\{fencelock_guard_decision="stale",fencelock_guard_kind="memory",`,
		`fencelock_guard_duration_seconds_bucket\{fencelock_guard_decision="stale",fencelock_guard_kind="memory",`,
		`fencelock_leases_held\{` + b + `,`,
		`fencelock_waiters\{` + b + `,`,
	}
	var text string
	missing := want
	assert.Eventually(t, func() bool {
		text = scrape(t, s.Addr())
		missing = missing[:0:0]
		for _, w := range want {
			if !regexp.MustCompile(`(?m)^` + w).MatchString(text) {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0
	}, 60*time.Second, 200*time.Millisecond)
	require.Empty(t, missing, "not in /metrics:\n%s", text)
}

func scrape(t *testing.T, addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return string(b)
}

func TestObserveOnMem(t *testing.T) { check(t, "mem://observe-test?ttl=1s", "mem") }

// On a real Redis server.
func TestObserveOnRedis(t *testing.T) {
	addr := redistest.Start(t).Addr()
	check(t, "redis://"+addr+"?prefix=observe&ttl=1s", "redis")
}

func TestBadConfig(t *testing.T) {
	_, err := Start(context.Background(), Config{URL: "mem://x", MetricsAddr: "127.0.0.1:0"})
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "-workers"), err.Error())
}
