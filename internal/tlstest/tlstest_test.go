package tlstest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// handshake runs one TLS handshake over loopback between the files' server
// configuration and client, and returns both sides' errors.
func handshake(t *testing.T, f *Files, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	sc, err := f.ServerConfig()
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", sc)
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		err = c.(*tls.Conn).Handshake()
		if err == nil {
			_, err = c.Write([]byte("ok"))
		}
		done <- err
	}()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), client)
	if err == nil {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		// TLS 1.3 reports a refused client certificate on the first read.
		_, err = c.Read(make([]byte, 2))
	}
	return <-done, err
}

func TestFiles(t *testing.T) {
	f := New(t)
	for _, name := range []string{"127.0.0.1", "localhost"} {
		cc, err := f.ClientConfig()
		require.NoError(t, err)
		cc.ServerName = name
		serr, cerr := handshake(t, f, cc)
		require.NoError(t, serr, name)
		require.NoError(t, cerr, name)
	}

	cc, err := f.ClientConfig()
	require.NoError(t, err)
	cc.ServerName = "example.com"
	_, cerr := handshake(t, f, cc)
	require.ErrorContains(t, cerr, "certificate", "the server certificate names only the loopback")

	cc, err = f.ClientConfig()
	require.NoError(t, err)
	cc.Certificates = nil
	serr, _ := handshake(t, f, cc)
	require.Error(t, serr, "the server requires a client certificate")

	other := New(t)
	cc, err = other.ClientConfig()
	require.NoError(t, err)
	_, cerr = handshake(t, f, cc)
	require.ErrorContains(t, cerr, "certificate", "another CA's server is not trusted")

	ks, err := os.ReadFile(f.ServerKeyStore)
	require.NoError(t, err)
	block, rest := pem.Decode(ks)
	require.Equal(t, "PRIVATE KEY", block.Type, "a PKCS#8 key first, as Java's PEM key stores want")
	_, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	require.NoError(t, err)
	_, err = tls.X509KeyPair(rest, ks)
	require.NoError(t, err, "then the server certificate, of that key")

	q, err := url.ParseQuery(f.Query())
	require.NoError(t, err)
	require.Equal(t, url.Values{"cacert": {f.CA}, "cert": {f.ClientCert}, "key": {f.ClientKey}}, q)
}
