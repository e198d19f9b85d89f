package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PgBouncer is a running PgBouncer in front of a Cluster.
type PgBouncer struct {
	dir  string
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartPgBouncer starts Debian's PgBouncer ($PGBOUNCER, else
// /usr/sbin/pgbouncer, else pgbouncer in $PATH) in pool_mode=transaction in
// front of c, on a free 127.0.0.1 port, and stops it and removes its
// directory when tb ends. Every database of c is reachable through it under
// its own name, for any role (auth_type=trust, as the cluster's own
// authentication), with at most 20 server connections per database and
// role. As root it runs as the cluster's user (PgBouncer refuses root). It
// fails tb (never skips) if PgBouncer is not installed or does not start,
// or if c was started WithTLS (PgBouncer would reach it without TLS).
//
// Through a transaction-mode pooler a client keeps its server connection
// for one transaction only: named prepared statements (pgx's default query
// exec mode) and session state (SET, advisory locks, LISTEN) do not
// survive from one transaction to the next.
func StartPgBouncer(tb testing.TB, c *Cluster) *PgBouncer {
	tb.Helper()
	b, err := startBouncer(c)
	if err != nil {
		tb.Fatalf("pgtest: pgbouncer: %v", err)
	}
	tb.Cleanup(b.Close)
	return b
}

func bouncerBin() (string, error) {
	if p := os.Getenv("PGBOUNCER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$PGBOUNCER: %w", err)
		}
		return p, nil
	}
	const debian = "/usr/sbin/pgbouncer"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	return "", errors.New("pgbouncer not found in $PGBOUNCER, /usr/sbin or $PATH: install it (Debian: apt-get install pgbouncer) or set PGBOUNCER to the binary")
}

func startBouncer(c *Cluster) (*PgBouncer, error) {
	bin, err := bouncerBin()
	if err != nil {
		return nil, err
	}
	if c.tls != nil {
		return nil, errors.New("the cluster serves TLS only (WithTLS), and PgBouncer is configured to reach it without TLS")
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{dir: dir}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if lastErr = b.run(bin, c); lastErr == nil {
			ok = true
			return b, nil
		}
	}
	return nil, lastErr
}

// config is pgbouncer.ini for a bouncer on port in front of c.
func (b *PgBouncer) config(port int, c *Cluster) string {
	return fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
auth_user = postgres
pool_mode = transaction
default_pool_size = 20
max_client_conn = 500
max_db_connections = 0
ignore_startup_parameters = extra_float_digits
server_login_retry = 1
server_connect_timeout = 5
logfile = %s
pidfile = %s
`, c.port, port, filepath.Join(b.dir, "userlist.txt"), b.LogPath(), filepath.Join(b.dir, "pgbouncer.pid"))
}

// run starts pgbouncer on a free port and waits until it passes a query to
// the cluster.
func (b *PgBouncer) run(bin string, c *Cluster) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	ini := filepath.Join(b.dir, "pgbouncer.ini")
	// auth_type=trust still looks the role up: in auth_file for postgres,
	// at the server (auth_user's auth_query) for the roles a test creates.
	if err := os.WriteFile(filepath.Join(b.dir, "userlist.txt"), []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(ini, []byte(b.config(port, c)), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(b.dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, ini)
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start pgbouncer: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.mu.Lock()
	b.cmd, b.done, b.port = cmd, done, port
	b.mu.Unlock()

	db, err := sql.Open(DriverName, b.DSN()+"&default_query_exec_mode=simple_protocol")
	if err != nil {
		return err
	}
	defer db.Close()
	return waitReady(context.Background(), "pgbouncer", cmd, done, b.stop, b.logTail, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "SELECT 1")
		return err
	}, 2*time.Second)
}

func (b *PgBouncer) logTail() string {
	var out []byte
	for _, name := range []string{"stderr.log", "pgbouncer.log"} {
		d, _ := os.ReadFile(filepath.Join(b.dir, name))
		if len(d) > 3000 {
			d = d[len(d)-3000:]
		}
		out = append(out, d...)
	}
	return string(out)
}

// LogPath returns PgBouncer's log file.
func (b *PgBouncer) LogPath() string { return filepath.Join(b.dir, "pgbouncer.log") }

// Port returns the TCP port PgBouncer listens on (127.0.0.1).
func (b *PgBouncer) Port() int { return b.port }

// DSN returns the URL of the cluster's "postgres" database through
// PgBouncer.
func (b *PgBouncer) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", b.port)
}

// Via returns dsn, a URL of the cluster (such as Cluster.NewDatabase
// returns), with its host and port replaced by PgBouncer's: the same
// database, role and parameters, through the pooler.
func (b *PgBouncer) Via(tb testing.TB, dsn string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	return u.String()
}

// stop shuts PgBouncer down (SIGTERM, an immediate shutdown; SIGKILL after
// 10s).
func (b *PgBouncer) stop() {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Close stops PgBouncer and removes its directory.
func (b *PgBouncer) Close() {
	b.stop()
	_ = os.RemoveAll(b.dir)
}
