package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/pgtest"
)

// redact hides the password, and does not echo a URL that does not parse
// (url.Parse may misread where its password ends).
func TestRedact(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"postgres://app:s3cret@/db?host=/tmp",
		"redis://:s3cret@127.0.0.1:6379/0",
		"etcd://app:s3cret@host:notaport/x",
		"etcd://app:s3cret/x@host:2379/locks",
		"etcd://app:s3cret@h:2379/x#frag",
	} {
		got := redact(raw)
		assert.NotContains(t, got, "s3cret", raw)
		assert.NotEmpty(t, got, raw)
	}
	assert.Equal(t, "postgres://app:xxxxx@/db?host=/tmp", redact("postgres://app:s3cret@/db?host=/tmp"))
	assert.Equal(t, "etcd://127.0.0.1:2379/locks", redact("etcd://127.0.0.1:2379/locks"))
}

// No subcommand prints a URL's password, in its errors or on stdout.
func TestNoPasswordPrinted(t *testing.T) {
	t.Setenv("FENCELOCK_URL", "")
	for _, args := range [][]string{
		{"chaos", "--url", "postgres://app:s3cret@/db?host=/tmp"},
		{"chaos", "--url", "mem://app:s3cret@x"},
		{"chaos", "--url", "etcd://127.0.0.1:1/x", "--guard", "etcd", "--guard-url", "ftp://app:s3cret@127.0.0.1:2379"},
		{"chaos", "--url", "etcd://127.0.0.1:1/x", "--guard", "etcd", "--guard-url", "http://127.0.0.1:2379,ftp://app:s3cret@h:1"},
		{"conformance", "etcd://app:s3cret@host:notaport/x"},
		{"conformance", "postgres://app:s3cret@/db?host=/tmp"},
		{"status", "--url", "etcd://app:s3cret@host:notaport/x", "n"},
		{"run", "--url", "etcd://app:s3cret@host:notaport/x", "--lock", "n", "--", "true"},
		{"bench", "--url", "etcd://app:s3cret@host:notaport/x"},
		{"demo", "--url", "etcd://app:s3cret@host:notaport/x"},
	} {
		if args[0] == "chaos" {
			args = append(args, "--out", t.TempDir())
		}
		r := cli(args...)
		assert.Equal(t, exitInvalid, r.code, "%q: %+v", args, r)
		assert.NotContains(t, r.stdout+r.stderr, "s3cret", "%q", args)
	}
}

// conformance prints the URL it runs against without its password.
func TestConformanceHeaderRedacted(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t).NewDatabase(t) + "&prefix=conformance_redact"
	// The server trusts local connections: the password is sent to no one,
	// but it is in the URL the command prints.
	url = strings.Replace(url, "postgres://postgres@", "postgres://postgres:s3cret@", 1)
	require.Contains(t, url, "s3cret")
	code, out, errOut, _ := conformanceRun(t, 5*time.Minute, "--run", "^TryAcquire$", url)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "conformance suite against postgres://postgres:xxxxx@")
	assert.NotContains(t, out+errOut, "s3cret")
}
