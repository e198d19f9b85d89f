package pgtest_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// TestTLS: a WithTLS cluster takes its own DSN (verify-full, the client
// certificate) over TLS, before and after a restart, and refuses a
// connection without TLS or without a client certificate: the server
// refuses both after the handshake, as no pg_hba.conf line matches or
// the cert method finds no certificate (SQLSTATE 28000).
func TestTLS(t *testing.T) {
	f := tlstest.New(t)
	c := pgtest.Start(t, pgtest.WithTLS(f))
	dsn := c.NewDatabase(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	require.Equal(t, "verify-full", q.Get("sslmode"))
	require.Equal(t, f.CA, q.Get("sslrootcert"))
	require.Equal(t, f.ClientCert, q.Get("sslcert"))
	require.Equal(t, f.ClientKey, q.Get("sslkey"))

	connect := func(t *testing.T, dsn string) (*pgx.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			t.Cleanup(func() { _ = conn.Close(context.Background()) })
		}
		return conn, err
	}
	checkTLS := func(t *testing.T) {
		conn, err := connect(t, dsn)
		require.NoError(t, err)
		var ssl bool
		var dn string
		require.NoError(t, conn.QueryRow(context.Background(),
			`SELECT ssl, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl, &dn))
		require.True(t, ssl)
		require.Equal(t, "/CN=fencelock-test-client", dn)
	}
	refused := func(t *testing.T, dsn, why string) {
		_, err := connect(t, dsn)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "28000", pe.Code, "%v", err)
		require.Contains(t, pe.Message, why)
	}
	edited := func(edit func(url.Values)) string {
		v := u.Query()
		edit(v)
		w := *u
		w.RawQuery = v.Encode()
		return w.String()
	}

	checkTLS(t)
	t.Run("no_client_cert", func(t *testing.T) {
		refused(t, edited(func(v url.Values) { v.Del("sslcert"); v.Del("sslkey") }), "requires a valid client certificate")
	})
	t.Run("no_tls", func(t *testing.T) {
		refused(t, edited(func(v url.Values) { v.Set("sslmode", "disable") }), "no encryption")
	})
	t.Run("restart", func(t *testing.T) {
		c.Restart(t)
		checkTLS(t)
	})
}
