package backend

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
)

// TLSParams are the query parameters URLTLS reads: PEM files for TLS.
//   - cacert: the CA bundle that verifies the servers (default: the system
//     roots).
//   - cert, key: the client certificate and its private key, for servers
//     that require one (mutual TLS); both or neither.
var TLSParams = []string{"cacert", "cert", "key"}

// URLTLS returns the TLS configuration of u for adapters' URL parsers: nil
// if u's scheme is not tlsScheme (the adapter's TLS scheme, such as
// "etcds"), else a configuration with TLS 1.2 at least, the cacert bundle
// as its roots (the system roots without it) and the cert/key pair as its
// client certificate. TLSParams on another scheme, an empty or unreadable
// file, a cacert without a PEM certificate, a cert without key (or key
// without cert) and a pair that does not load are errors matching
// ErrInvalidURL. The files are read now, once: a rotated certificate needs
// a new Locker.
func URLTLS(u *url.URL, tlsScheme string) (*tls.Config, error) {
	bad := func(format string, args ...any) (*tls.Config, error) {
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalidURL, u.Redacted(), fmt.Sprintf(format, args...))
	}
	q := u.Query()
	for _, p := range TLSParams {
		if q.Has(p) && q.Get(p) == "" {
			return bad("%s is empty", p)
		}
	}
	cacert, cert, key := q.Get("cacert"), q.Get("cert"), q.Get("key")
	if u.Scheme != tlsScheme {
		if cacert != "" || cert != "" || key != "" {
			return bad("cacert, cert and key are TLS settings: use the %s:// scheme for TLS", tlsScheme)
		}
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return bad("cacert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return bad("cacert: no PEM certificate in %s", cacert)
		}
		tc.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return bad("cert and key go together: give both or neither")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return bad("cert/key: %v", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}
