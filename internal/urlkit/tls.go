package urlkit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// TLSParams are the query parameters TLS reads: PEM files for TLS.
//   - cacert: the CA bundle that verifies the servers (default: the system
//     roots).
//   - cert, key: the client certificate and its private key, for servers
//     that require one (mutual TLS); both or neither.
var TLSParams = []string{"cacert", "cert", "key"}

// TLS returns the TLS configuration of u for adapters' URL parsers: nil
// if u's scheme is not tlsScheme (the adapter's TLS scheme, such as
// "etcds"), else a configuration with TLS 1.2 at least, the cacert bundle
// as its roots (the system roots without it) and the cert/key pair as its
// client certificate. TLSParams on another scheme, an empty or unreadable
// file, a cacert without a PEM certificate, a cert without key (or key
// without cert) and a pair that does not load are errors matching
// driver.ErrInvalidURL. The files are read now, once: a rotated certificate needs
// a new Locker.
func TLS(u *url.URL, tlsScheme string) (*tls.Config, error) {
	bad := func(format string, args ...any) (*tls.Config, error) {
		return nil, fmt.Errorf("%w: %s: %s", driver.ErrInvalidURL, Redact(u), fmt.Sprintf(format, args...))
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

// TLSProbeTimeout bounds CheckTLS and SpeaksTLS.
const TLSProbeTimeout = time.Second

// CheckTLS tells why TLS with the server at addr (host:port) fails, if it
// does, for adapters whose client keeps the handshake's error to itself (a
// wrong CA, a missing client certificate or a plain port would otherwise
// look like an unreachable server). It handshakes once with tc and reads
// briefly, as a server refuses a client certificate after a TLS 1.3
// handshake, within TLSProbeTimeout and ctx. A server that cannot be
// reached, or that does not answer within the bound, is no TLS problem
// (nil), nor is one that answers. The error says "TLS" and, when the
// server answered like a plain one, that it may not serve TLS on addr.
func CheckTLS(ctx context.Context, addr string, tc *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, TLSProbeTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	defer raw.Close()
	tc = tc.Clone()
	if tc.ServerName == "" {
		tc.ServerName, _, _ = net.SplitHostPort(addr)
	}
	conn := tls.Client(raw, tc)
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	err = conn.HandshakeContext(ctx)
	handshook := err == nil
	if handshook {
		_, err = conn.Read(make([]byte, 1))
	}
	var nerr net.Error
	if err == nil || ctx.Err() != nil || (errors.As(err, &nerr) && nerr.Timeout()) {
		return nil
	}
	if !handshook && NotTLS(err) {
		return fmt.Errorf("TLS handshake with %s failed: %w (the server does not seem to speak TLS there: is it a plain port?)", addr, err)
	}
	// A failed verification, a TLS alert (remote error: tls: ...), or a
	// connection closed during or right after the handshake.
	return fmt.Errorf("TLS with %s: %w", addr, err)
}

// NotTLS reports whether a failed TLS handshake looks like a server that
// does not speak TLS: it closed the connection or answered with something
// else than a TLS record.
func NotTLS(err error) bool {
	var rh tls.RecordHeaderError
	return errors.As(err, &rh) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET)
}

// SpeaksTLS reports whether the server at addr answers a TLS client hello
// like a TLS server (a handshake, or a TLS alert such as a refused client
// certificate), within TLSProbeTimeout and ctx, for adapters that tell a
// plain URL aimed at a TLS port from an unreachable server. It verifies
// nothing: it only tells the protocol.
func SpeaksTLS(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, TLSProbeTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer raw.Close()
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a probe of the protocol, no data
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	err = conn.HandshakeContext(ctx)
	var alert tls.AlertError
	return err == nil || errors.As(err, &alert) || strings.Contains(fmt.Sprint(err), "remote error: tls:")
}

// PlainToTLSHint is the text adapters add to an error when SpeaksTLS finds
// that a plain URL reaches a TLS port.
func PlainToTLSHint(addr, tlsScheme string) string {
	return fmt.Sprintf("the server at %s speaks TLS: use the %s:// scheme (with cacert, cert and key as needed)", addr, tlsScheme)
}
