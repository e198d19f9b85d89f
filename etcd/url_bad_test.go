package etcd

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/tlstest"
	"github.com/fencelock/fencelock/internal/urltest"
)

// TestOpenBadURLs: every bad etcd or etcds URL is refused with its reason,
// before any connection to the sentinel its hosts name, with no password
// in the error.
func TestOpenBadURLs(t *testing.T) {
	s := urltest.NewSentinel(t)
	h := s.Addr()
	pw := urltest.Secret
	f := tlstest.New(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	missing := filepath.Join(t.TempDir(), "missing.pem")
	qe := url.QueryEscape
	urltest.RequireRefused(t, s, []urltest.Bad{
		{"etcd:///x", "no host: want etcd://host:port,host:port/prefix"},
		{"etcd://" + h + ",,h2:2379/x", `empty host in the host list`},
		{"etcd://" + h + ",h2:0/x", `host "h2:0": port "0" is not a number from 1 to 65535`},
		{"etcd://h1:99999/x", `host "h1:99999": port "99999" is not a number from 1 to 65535`},
		{"etcd://h1:abc," + h + "/x", `host "h1:abc": port "abc" is not a number from 1 to 65535`},
		{"etcd://:2379/x", `host ":2379": empty host name`},
		{"etcd://::1/x", `host "::1": put IPv6 addresses in brackets, e.g. [::1]:2379`},
		{"etcd://" + h + "/x?dial_timeout=soon", `dial_timeout="soon" is not a duration such as 10s`},
		{"etcd://" + h + "/x?dial_timeout=-1s", `dial_timeout="-1s": must be positive`},
		{"etcd://" + h + "/x?dial_timeout=0s", `dial_timeout="0s": must be positive`},
		{"etcd://" + h + "/x?dial_timeout=1s&dial_timeout=2s", "query parameter dial_timeout given 2 times"},
		{"etcd://" + h + "/x?ttl=1500ms", `ttl="1500ms": etcd lease TTLs are whole seconds`},
		{"etcd://" + h + "/x?ttl=500ms", `ttl="500ms": under the minimum TTL of etcd URLs, 1s`},
		{"etcd://" + h + "/x?ttl=-1s", `ttl="-1s": the TTL must be positive`},
		{"etcd://" + h + "/x?ttl=5s&drift=5s", `drift="5s": the drift margin must be smaller than the TTL (5s)`},
		{"etcd://" + h + "/x?auto_renew=yes", `auto_renew="yes" is not true or false`},
		{"etcd://" + h + "/x?tls=true", `unknown query parameter "tls" for scheme etcd (known: `},
		{"etcd://" + h + "/x?cacert=" + qe(f.CA), "cacert, cert and key are TLS settings: use the etcds:// scheme for TLS"},
		{"etcd://" + h + "/x?cert=a&key=b", "use the etcds:// scheme for TLS"},
		{"etcds://" + h + "/x?cacert=" + qe(missing), "cacert: open " + missing},
		{"etcds://" + h + "/x?cacert=" + qe(notPEM), "cacert: no PEM certificate in " + notPEM},
		{"etcds://" + h + "/x?cert=" + qe(f.ClientCert), "cert and key go together: give both or neither"},
		{"etcds://" + h + "/x?cert=" + qe(f.ClientCert) + "&key=" + qe(f.ClientCert), "cert/key: tls: "},
		{"etcds://" + h + "/x?cacert=", "cacert is empty"},
		{"etcd://:" + pw + "@" + h + "/x", "etcd://:xxxxx@" + h + "/x: empty user name"},
		{"etcd://app@" + h + "/x", `user "app" has no password: etcd authenticates a user name with its password`},
		{"etcd://" + h + "/x#frag", "a URL fragment (#...) is not allowed"},
		{"etcd:" + h, "etcd: URL without //: want etcd://host/path"},
		{"etcd://app:" + pw + "@" + h + ":notaport/locks", "cannot parse the URL: invalid port after host"},
		{"etcd://app:" + pw + "/x@" + h + "/x", "invalid port after host"},
		{"etcds://app:" + pw + "@" + h + "/x?cacert=" + qe(notPEM), "etcds://app:xxxxx@" + h + "/x?cacert="},
		{"etcd://app:" + pw + "@" + h + "/x?dial_timeout=0", `dial_timeout="0": must be positive`},
		{"etcd://app:" + pw + "@" + h + "/x?ttl=1s&ttl=1s", "given 2 times"},
	})
}
