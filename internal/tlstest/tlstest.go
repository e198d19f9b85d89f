// Package tlstest makes, at test time, the certificates that TLS tests need:
// a CA, a server certificate for 127.0.0.1, ::1 and localhost, and a client
// certificate, all signed by the CA, as PEM files in a temporary directory.
// Nothing is committed: every call makes new keys.
//
// The server certificate is valid for client authentication too, as etcd
// member certificates usually are, so a server that dials itself (or a
// test client that borrows the server's pair) is accepted.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the PEM files of one CA and the certificates it signed.
type Files struct {
	Dir        string // where the files are
	CA         string // the CA certificate (what clients and servers trust)
	ServerCert string // the server certificate: IP SANs 127.0.0.1 and ::1, DNS SAN localhost
	ServerKey  string // its private key
	ClientCert string // the client certificate (CN fencelock-test-client)
	ClientKey  string // its private key
	// ServerKeyStore is ServerKey (PKCS#8) followed by ServerCert in one
	// file, the PEM key store Java servers such as ZooKeeper read
	// (ssl.keyStore.type=PEM).
	ServerKeyStore string
}

// New writes a new CA, server and client certificate into a temporary
// directory of tb, failing tb on error.
func New(tb testing.TB) *Files {
	tb.Helper()
	f, err := Write(tb.TempDir())
	if err != nil {
		tb.Fatalf("tlstest: %v", err)
	}
	return f
}

// Write writes a new CA, server and client certificate into dir: ca.pem,
// server.pem, server-key.pem, server-keystore.pem, client.pem and
// client-key.pem.
func Write(dir string) (*Files, error) {
	f := &Files{
		Dir:        dir,
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),

		ServerKeyStore: filepath.Join(dir, "server-keystore.pem"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fencelock-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(serial int64, cn string, usage []x509.ExtKeyUsage, ips []net.IP, dns []string, certPath, keyPath string) error {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return err
		}
		kder, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return err
		}
		return errors.Join(writePEM(certPath, "CERTIFICATE", der), writePEM(keyPath, "PRIVATE KEY", kder))
	}
	if err := leaf(2, "fencelock-test-server",
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"},
		f.ServerCert, f.ServerKey); err != nil {
		return nil, err
	}
	if err := concat(f.ServerKeyStore, f.ServerKey, f.ServerCert); err != nil {
		return nil, err
	}
	if err := leaf(3, "fencelock-test-client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		nil, nil, f.ClientCert, f.ClientKey); err != nil {
		return nil, err
	}
	return f, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// concat writes the files in into out.
func concat(out string, in ...string) error {
	var all []byte
	for _, p := range in {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		all = append(all, b...)
	}
	return os.WriteFile(out, all, 0o600)
}

// Query returns the URL query that points a client at the files:
// cacert=CA&cert=ClientCert&key=ClientKey, encoded.
func (f *Files) Query() string {
	return url.Values{"cacert": {f.CA}, "cert": {f.ClientCert}, "key": {f.ClientKey}}.Encode()
}

// ServerConfig returns a TLS configuration for servers: the server
// certificate, and client certificates required and verified against the
// CA.
func (f *Files) ServerConfig() (*tls.Config, error) {
	pair, pool, err := f.load(f.ServerCert, f.ServerKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}

// ClientConfig returns a TLS configuration for clients: the CA as the only
// root, and the client certificate.
func (f *Files) ClientConfig() (*tls.Config, error) {
	pair, pool, err := f.load(f.ClientCert, f.ClientKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{pair}}, nil
}

// load reads a certificate and key pair, and the CA as a pool.
func (f *Files) load(cert, key string) (tls.Certificate, *x509.CertPool, error) {
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tlstest: %w", err)
	}
	b, err := os.ReadFile(f.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tlstest: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return tls.Certificate{}, nil, fmt.Errorf("tlstest: no certificate in %s", f.CA)
	}
	return pair, pool, nil
}
