package etcd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/tlstest"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url       string
		endpoints []string
		prefix    string
		user      string
		pass      string
		dial      time.Duration
	}{
		{"etcd://h1:2379,h2:2380/locks?ttl=10s", []string{"http://h1:2379", "http://h2:2380"}, "locks", "", "", DefaultDialTimeout},
		{"etcd://h1", []string{"http://h1:2379"}, DefaultPrefix, "", "", DefaultDialTimeout},
		{"etcd://h1/", []string{"http://h1:2379"}, DefaultPrefix, "", "", DefaultDialTimeout},
		{"etcd://h1:1/a/b/?dial_timeout=250ms", []string{"http://h1:1"}, "a/b", "", "", 250 * time.Millisecond},
		{"etcd://h1//abs", []string{"http://h1:2379"}, "/abs", "", "", DefaultDialTimeout},
		{"etcd://root:s3cr%40t@10.0.0.1:2379/x", []string{"http://10.0.0.1:2379"}, "x", "root", "s3cr@t", DefaultDialTimeout},
		{"etcd://[::1]:2379/x", []string{"http://[::1]:2379"}, "x", "", "", DefaultDialTimeout},
		{"etcd://[::1]/x", []string{"http://[::1]:2379"}, "x", "", "", DefaultDialTimeout},
		{"etcds://h1,h2:2380/x", []string{"https://h1:2379", "https://h2:2380"}, "x", "", "", DefaultDialTimeout},
	} {
		t.Run(tc.url, func(t *testing.T) {
			cfg, prefix, err := parseURL(mustParse(t, tc.url))
			require.NoError(t, err)
			assert.Equal(t, tc.endpoints, cfg.Endpoints)
			assert.Equal(t, tc.prefix, prefix)
			assert.Equal(t, tc.user, cfg.Username)
			assert.Equal(t, tc.pass, cfg.Password)
			assert.Equal(t, tc.dial, cfg.DialTimeout)
			assert.Equal(t, strings.HasPrefix(tc.url, "etcds:"), cfg.TLS != nil, "TLS iff etcds")
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		url  string
		want string
	}{
		{"etcd:///x", "no host"},
		{"etcd://h1:2379,,h2:2379/x", "empty host"},
		{"etcd://h1:2379,h2:0/x", "port"},
		{"etcd://h1:99999/x", "port"},
		{"etcd://h1:abc,h2:2379/x", "port"},
		{"etcd://:2379/x", "empty host"},
		{"etcd://::1/x", "IPv6"},
		{"etcd://h1/x?dial_timeout=soon", "dial_timeout"},
		{"etcd://h1/x?dial_timeout=-1s", "dial_timeout"},
		{"etcd://h1/x?cacert=" + notPEM, "etcds"},
		{"etcd://h1/x?cert=a&key=b", "etcds"},
		{"etcds://h1/x?cacert=" + missing, "cacert"},
		{"etcds://h1/x?cacert=" + notPEM, "no PEM certificate"},
		{"etcds://h1/x?cert=" + missing, "give both or neither"},
		{"etcds://h1/x?cert=" + missing + "&key=" + missing, "cert/key"},
		{"etcds://h1/x?cacert=", "cacert is empty"},
		{"etcd://:pw@h1/x", "empty user name"},
		{"etcd://h1/x#frag", "fragment"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, _, err := parseURL(mustParse(t, tc.url))
			require.ErrorIs(t, err, backend.ErrInvalidURL)
			assert.Contains(t, err.Error(), tc.want)
			// And through backend.Open, which calls the registered scheme.
			_, err = backend.Open(context.Background(), tc.url)
			require.ErrorIs(t, err, backend.ErrInvalidURL)
		})
	}
	_, err := backend.Open(context.Background(), "etcd://h1/x?tls=true")
	require.ErrorIs(t, err, backend.ErrInvalidURL, "unknown parameters are rejected")
}

func TestParseURLTLSFiles(t *testing.T) {
	f := tlstest.New(t)
	cfg, _, err := parseURL(mustParse(t, "etcds://h1/x?"+f.Query()))
	require.NoError(t, err)
	require.NotNil(t, cfg.TLS)
	assert.NotNil(t, cfg.TLS.RootCAs)
	assert.Len(t, cfg.TLS.Certificates, 1)

	_, _, err = parseURL(mustParse(t, "etcds://h1/x?cert="+f.ClientCert+"&key="+f.ClientCert))
	require.ErrorIs(t, err, backend.ErrInvalidURL, "a certificate is not a key")
}

// Open by URL against the embedded server.
func TestOpenURL(t *testing.T) {
	pfx := testPrefix(t)
	u := strings.Replace(srv.Endpoints()[0], "http://", "etcd://", 1) + "/" + pfx + "?ttl=5s&holder=url-test"
	l, err := backend.Open(context.Background(), u)
	require.NoError(t, err)
	defer l.Close()
	ls, err := l.Acquire(tctx(t, 10*time.Second), "u")
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, ls.TTL())
	assert.Equal(t, "url-test", ls.Holder())
	kvs := keys(t, client(t), pfx, "u")
	require.Len(t, kvs, 1)
	assert.Equal(t, "url-test", holderOf(kvs[0].Value))
	release(t, ls)
	require.NoError(t, l.Close())

	_, err = backend.Open(context.Background(), strings.Replace(u, "ttl=5s", "ttl=2500ms", 1))
	require.ErrorIs(t, err, backend.ErrInvalidOption, "TTL must be whole seconds")
	require.ErrorIs(t, err, backend.ErrInvalidURL)
}

// clientv3 dials lazily; Open must still tell an unreachable cluster apart
// from a held lock by failing itself.
func TestOpenUnreachable(t *testing.T) {
	start := time.Now()
	_, err := backend.Open(context.Background(), "etcd://127.0.0.1:1/x?dial_timeout=500ms")
	require.Error(t, err)
	assert.NotErrorIs(t, err, backend.ErrInvalidURL)
	assert.Contains(t, err.Error(), "cannot reach")
	assert.Less(t, time.Since(start), 10*time.Second)
}
