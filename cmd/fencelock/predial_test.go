package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Bad input is refused before anything is dialled, in every subcommand:
// 65 (or 64 for a usage error) at once, never 69 from an unreachable
// backend (127.0.0.1:1) nor a wait. A --ttl is checked by the URL's
// scheme's own rules (etcd: whole seconds, at least 1s) before any dial.
func TestBadInputBeforeDial(t *testing.T) {
	t.Setenv("FENCELOCK_URL", "")
	const etcd = "etcd://127.0.0.1:1/x"
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"run", "--url", "mem://", "--lock", "a", "--wait-timeout", "-1s", "--", "true"}, exitUsage},
		{[]string{"run", "--url", etcd, "--lock", "bad\x00name", "--", "true"}, exitInvalid},
		{[]string{"run", "--url", etcd, "--lock", "a", "--ttl", "2500ms", "--", "true"}, exitInvalid},
		{[]string{"run", "--url", etcd, "--lock", "a", "--ttl", "-1s", "--", "true"}, exitInvalid},
		{[]string{"run", "--url", etcd, "--lock", "a", "--max-hold", "-1s", "--", "true"}, exitInvalid},
		{[]string{"run", "--url", "etcd://127.0.0.1:1/x?bogus=1", "--lock", "a", "--", "true"}, exitInvalid},
		{[]string{"run", "--url", "redis://127.0.0.1:1/0", "--lock", "a", "--ttl", "1500us", "--", "true"}, exitInvalid},
		{[]string{"run", "--url", etcd, "--lock", "a", "--lock-delay", "-1s", "--", "true"}, exitInvalid},
		{[]string{"elect", "--url", etcd, "--name", "a", "--lock-delay", "-1s", "--", "true"}, exitInvalid},
		{[]string{"run", "--url", "mem://?lock_delay=-1s", "--lock", "a", "--", "true"}, exitInvalid},
		{[]string{"bench", "--url", etcd, "--lock", ""}, exitInvalid},
		{[]string{"bench", "--url", etcd, "--lock", "bad\x00name"}, exitInvalid},
		{[]string{"demo", "--ttl", "-1s"}, exitInvalid},
		{[]string{"demo", "--ttl", "0"}, exitInvalid},
		{[]string{"demo", "--ttl", "2500ms"}, exitInvalid}, // the embedded etcd's rules
		{[]string{"demo", "--url", "mem://", "--ttl", "-1s"}, exitInvalid},
		{[]string{"demo", "--url", etcd, "--ttl", "1500ms"}, exitInvalid},
		{[]string{"elect", "--url", etcd, "--name", "a", "--ttl", "2500ms", "--", "true"}, exitInvalid},
		{[]string{"advise", "--url", "etcd://127.0.0.1:1/x?bogus=1", "a"}, exitInvalid},
	} {
		start := time.Now()
		r := cli(c.args...)
		assert.Equal(t, c.want, r.code, "%q: %+v", c.args, r)
		assert.Less(t, time.Since(start), 5*time.Second, "%q", c.args)
		assert.True(t, strings.HasPrefix(r.stderr, "fencelock "+c.args[0]+": "), "%q: %q", c.args, r.stderr)
		assert.NotContains(t, r.stdout, "starting an embedded etcd", "%q", c.args)
	}
	// What the backend takes is let through to the dial (69 here).
	r := cli("elect", "--url", etcd, "--name", "a", "--ttl", "3s", "--connect-timeout", "2s", "--", "true")
	assert.Equal(t, exitUnavailable, r.code, "%+v", r)
	r = cli("run", "--url", etcd, "--lock", "a", "--ttl", "3s", "--connect-timeout", "2s", "--", "true")
	assert.Equal(t, exitUnavailable, r.code, "%+v", r)
}

// A valid --ttl on the shortest mem URL is taken: the check puts the TTL in
// the URL's query without rewriting "mem://" (url.URL.String writes it back
// as "mem:", which no scheme takes).
func TestTTLFlagOnBareMemURL(t *testing.T) {
	t.Setenv("FENCELOCK_URL", "")
	for _, args := range [][]string{
		{"demo", "--url", "mem://"},
		{"run", "--url", "mem://", "--lock", "a", "--ttl", "5s", "--", "true"},
		{"run", "--url", "mem://?ttl=3s", "--lock", "a", "--ttl", "5s", "--", "true"},
		{"elect", "--url", "mem://", "--name", "a", "--ttl", "5s", "--", "true"},
		{"run", "--url", "mem://", "--lock", "a", "--lock-delay", "2s", "--", "true"},
		{"elect", "--url", "mem://", "--name", "a", "--lock-delay", "2s", "--", "true"},
	} {
		r := cli(args...)
		assert.Equal(t, exitOK, r.code, "%q: %+v", args, r)
	}
}
