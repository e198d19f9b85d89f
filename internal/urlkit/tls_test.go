package urlkit_test

import (
	"crypto/tls"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/tlstest"
	"github.com/fencelock/fencelock/internal/urlkit"
)

func TestTLS(t *testing.T) {
	f := tlstest.New(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	missing := filepath.Join(t.TempDir(), "missing.pem")
	parse := func(raw string) *url.URL {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		return u
	}

	// No TLS scheme, no TLS parameters: no TLS.
	tc, err := urlkit.TLS(parse("x://h/p?ttl=1s"), "xs")
	require.NoError(t, err)
	assert.Nil(t, tc)

	// The TLS scheme alone: system roots, no client certificate.
	tc, err = urlkit.TLS(parse("xs://h/p"), "xs")
	require.NoError(t, err)
	require.NotNil(t, tc)
	assert.GreaterOrEqual(t, tc.MinVersion, uint16(tls.VersionTLS12))
	assert.Nil(t, tc.RootCAs)
	assert.Empty(t, tc.Certificates)

	// All three files.
	tc, err = urlkit.TLS(parse("xs://h/p?"+f.Query()), "xs")
	require.NoError(t, err)
	require.NotNil(t, tc.RootCAs)
	require.Len(t, tc.Certificates, 1)
	assert.False(t, tc.InsecureSkipVerify)

	// A private CA alone (server-only TLS).
	tc, err = urlkit.TLS(parse("xs://h/p?cacert="+f.CA), "xs")
	require.NoError(t, err)
	assert.NotNil(t, tc.RootCAs)
	assert.Empty(t, tc.Certificates)

	for _, bad := range []struct{ url, want string }{
		{"x://h/p?cacert=" + f.CA, "use the xs:// scheme"},
		{"x://h/p?cert=" + f.ClientCert + "&key=" + f.ClientKey, "use the xs:// scheme"},
		{"x://h/p?cacert=", "cacert is empty"},
		{"xs://h/p?key=", "key is empty"},
		{"xs://h/p?cacert=" + missing, "cacert"},
		{"xs://h/p?cacert=" + notPEM, "no PEM certificate"},
		{"xs://h/p?cert=" + f.ClientCert, "give both or neither"},
		{"xs://h/p?key=" + f.ClientKey, "give both or neither"},
		{"xs://h/p?cert=" + missing + "&key=" + missing, "cert/key"},
		{"xs://h/p?cert=" + f.ClientCert + "&key=" + f.ServerKey, "cert/key"},           // not its key
		{"xs://h/p?cert=" + f.ClientCert + "&key=" + f.ClientCert, "cert/key"},          // a certificate is not a key
		{"xs://u:secret@h/p?cert=" + f.ClientCert + "&key=" + notPEM, "xs://u:xxxxx@h"}, // redacted
	} {
		_, err := urlkit.TLS(parse(bad.url), "xs")
		require.ErrorIs(t, err, driver.ErrInvalidURL, bad.url)
		assert.Contains(t, err.Error(), bad.want, bad.url)
		assert.NotContains(t, err.Error(), "secret", bad.url)
	}
}
