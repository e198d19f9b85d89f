package pgtest

import (
	"os"
	"path/filepath"
)

// The files WithTLS writes into the cluster directory.
const (
	serverCert = "server.pem"
	serverKey  = "server-key.pem"
	caCert     = "ca.pem"
	hbaConf    = "pg_hba.conf"
	identConf  = "pg_ident.conf"
)

// hba accepts TCP connections over TLS only, from 127.0.0.1, authenticated
// by a client certificate signed by the CA (ssl_ca_file), whose CN the
// pgtest map turns into a role name. No "host" line: a connection without
// TLS finds no entry and is refused.
const hba = "hostssl all all 127.0.0.1/32 cert map=pgtest\n"

// ident maps tlstest's client certificate to the postgres role.
const ident = "pgtest fencelock-test-client postgres\n"

func (c *Cluster) tlsFile(name string) string { return filepath.Join(c.dir, name) }

// writeTLSFiles copies the CA, the server certificate and its key into the
// cluster directory, with pg_hba.conf and pg_ident.conf, owned by the user
// the server runs as and readable by it alone: PostgreSQL refuses a key
// file that others can read, and as root the originals (in a test's
// temporary directory, mode 0600) are not the server's to read.
func (c *Cluster) writeTLSFiles() error {
	for name, from := range map[string]string{serverCert: c.tls.ServerCert, serverKey: c.tls.ServerKey, caCert: c.tls.CA} {
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		if err := c.writeFile(name, b); err != nil {
			return err
		}
	}
	if err := c.writeFile(hbaConf, []byte(hba)); err != nil {
		return err
	}
	return c.writeFile(identConf, []byte(ident))
}

// writeFile writes a file of mode 0600 into the cluster directory, owned by
// the server's user.
func (c *Cluster) writeFile(name string, b []byte) error {
	p := c.tlsFile(name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return err
	}
	if c.cred != nil {
		return os.Chown(p, int(c.cred.Uid), int(c.cred.Gid))
	}
	return nil
}
