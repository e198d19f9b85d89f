// Package pgtest runs throwaway PostgreSQL clusters for tests: initdb in a
// new temporary directory, trust authentication, a free 127.0.0.1 port, the
// unix socket in the same directory, stopped and removed when the test
// ends. Fsync is off but synchronous_commit on: a commit has reached the
// kernel when it returns, so it survives a crash of the server (Kill), not
// of the machine.
//
// The server binaries (initdb, postgres) come from $PGBIN if set, else from
// the newest /usr/lib/postgresql/*/bin (Debian's postgresql package), else
// from $PATH. A missing binary fails the test: it is never skipped.
//
// PostgreSQL refuses to run as root. When the test runs as root (CI does),
// initdb and postgres run as the "postgres" system user (created by the
// Debian package; override with $PGTEST_USER), with the cluster directory
// handed to that user.
//
// With WithTLS the cluster serves TCP clients over TLS only and requires a
// client certificate, and its DSNs carry sslmode=verify-full and the
// certificate files.
//
// StartPgBouncer puts Debian's pgbouncer, in transaction pooling mode, in
// front of a cluster. StartStandby makes a streaming standby of a cluster
// (asynchronous or synchronous), Standby.Promote promotes it, and Follow
// rebuilds the old primary as the promoted one's standby, so that a pair
// can fail over again and again.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// DriverName is the database/sql driver name to open DSNs with.
const DriverName = "pgx"

const readyTimeout = 60 * time.Second

// Cluster is a running throwaway PostgreSQL cluster.
type Cluster struct {
	bin  string // directory of initdb and postgres
	dir  string // cluster root: data/, the socket, the log
	port int
	cred *syscall.Credential // nil unless running as root
	tls  *tlstest.Files      // WithTLS's, or nil

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
	dbs    atomic.Int64
}

// Option configures Start.
type Option func(*Cluster)

// WithTLS serves TCP clients over TLS only, with f's server certificate
// (which names 127.0.0.1), and requires a client certificate signed by f's
// CA: every TCP connection authenticates with its certificate (pg_hba.conf
// method cert), and f's client certificate (CN fencelock-test-client) logs
// in as the postgres role only. A connection without TLS, or over TLS
// without a client certificate, is refused. DSN and NewDatabase return
// URLs with sslmode=verify-full, sslrootcert=f.CA, sslcert=f.ClientCert and
// sslkey=f.ClientKey. The server reads copies of f's files, owned by the
// user it runs as (PostgreSQL refuses a key file others can read).
// StartPgBouncer does not support such a cluster.
func WithTLS(f *tlstest.Files) Option { return func(c *Cluster) { c.tls = f } }

// Start creates and starts a cluster and stops and removes it when tb ends.
// It fails tb (never skips) if PostgreSQL is not installed or does not start.
func Start(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	c, err := start(opts)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// binDir finds the directory holding initdb and postgres.
func binDir() (string, error) {
	if d := os.Getenv("PGBIN"); d != "" {
		return d, checkBin(d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if checkBin(d) == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		return d, checkBin(d)
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found in $PGBIN, /usr/lib/postgresql/*/bin or $PATH: " +
		"install them (Debian: apt-get install postgresql) or set PGBIN to their directory")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func checkBin(d string) error {
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(d, name)); err != nil {
			return fmt.Errorf("PostgreSQL binary %s missing in %s (install Debian's postgresql package or set PGBIN): %w", name, d, err)
		}
	}
	return nil
}

func start(opts []Option) (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, dir: dir}
	for _, o := range opts {
		o(c)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if os.Geteuid() == 0 {
		name := os.Getenv("PGTEST_USER")
		if name == "" {
			name = "postgres"
		}
		u, err := user.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL must run as an unprivileged user: %w (install Debian's postgresql package, which creates the postgres user, or set PGTEST_USER)", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	out, err := c.command("initdb", "-D", c.dataDir(), "-U", "postgres", "--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if c.tls != nil {
		if err := c.writeTLSFiles(); err != nil {
			return nil, fmt.Errorf("TLS files: %w", err)
		}
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if lastErr = c.run(context.Background()); lastErr == nil {
			ok = true
			return c, nil
		}
		c.port = 0 // the port may have been taken: pick another
	}
	return nil, lastErr
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

// LogPath returns the server's log file.
func (c *Cluster) LogPath() string { return filepath.Join(c.dir, "postgres.log") }

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// The server dies with the test binary, even when it panics on a
	// -timeout or is killed (then no clean-up runs): the postmaster's
	// children exit when it is gone. Set after the credentials change,
	// which would clear it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// run starts the postgres process (on c.port, or a free one if zero) and
// waits until it accepts connections (at most readyTimeout; when ctx ends
// first, it stops it).
func (c *Cluster) run(ctx context.Context) error {
	if c.port == 0 {
		port, err := freeport.Port() // outside the ephemeral range: kept over a Restart
		if err != nil {
			return err
		}
		c.port = port
	}
	logf, err := os.OpenFile(c.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := c.command("postgres", "-D", c.dataDir(), "-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+c.dir,
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=16MB")
	if c.tls != nil {
		for _, set := range []string{
			"ssl=on", "ssl_cert_file=" + c.tlsFile(serverCert), "ssl_key_file=" + c.tlsFile(serverKey),
			"ssl_ca_file=" + c.tlsFile(caCert), "hba_file=" + c.tlsFile(hbaConf), "ident_file=" + c.tlsFile(identConf),
		} {
			cmd.Args = append(cmd.Args, "-c", set)
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.cmd, c.done = cmd, done
	c.mu.Unlock()

	db, err := sql.Open(DriverName, c.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	return waitReady(ctx, "postgres", cmd, done, c.stop, c.logTail, func(ctx context.Context) error { return db.PingContext(ctx) }, time.Second)
}

// waitReady polls probe (each try bounded by tryTimeout) until it succeeds,
// the process cmd, named name, exits (done closes), readyTimeout passes or
// ctx ends; then it stops the process and returns an error with its log's
// tail.
func waitReady(ctx context.Context, name string, cmd *exec.Cmd, done <-chan struct{}, stop func(), logTail func() string, probe func(context.Context) error, tryTimeout time.Duration) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		tctx, cancel := context.WithTimeout(ctx, tryTimeout)
		err := probe(tctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited during start-up: %v\n%s", name, cmd.ProcessState, logTail())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("%s not ready after %v: %v\n%s", name, readyTimeout, err, logTail())
		}
		if ctx.Err() != nil {
			stop()
			return fmt.Errorf("%s not ready: %w", name, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) logTail() string {
	b, _ := os.ReadFile(c.LogPath())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Port returns the TCP port the server listens on (127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// DSN returns the URL of the cluster's "postgres" database, for
// sql.Open(DriverName, dsn): sslmode=disable, or with WithTLS
// sslmode=verify-full and the CA, client certificate and key files.
func (c *Cluster) DSN() string { return c.dsn("postgres") }

func (c *Cluster) dsn(db string) string {
	q := "sslmode=disable"
	if c.tls != nil {
		q = url.Values{"sslmode": {"verify-full"}, "sslrootcert": {c.tls.CA},
			"sslcert": {c.tls.ClientCert}, "sslkey": {c.tls.ClientKey}}.Encode()
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?%s", c.port, db, q)
}

// NewDatabase creates an empty database for one test and returns its DSN.
// It is cheap (a copy of template1), so give every test its own.
func (c *Cluster) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("t%d", c.dbs.Add(1))
	db, err := sql.Open(DriverName, c.DSN())
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	return c.dsn(name)
}

// Open opens dsn with the pgx database/sql driver and closes it when tb ends.
func Open(tb testing.TB, dsn string) *sql.DB {
	tb.Helper()
	db, err := sql.Open(DriverName, dsn)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// Restart stops the server if it runs (a fast shutdown: open connections
// are cut) and starts it again on the same port over the same data
// directory (after Stop or Kill, it only starts it).
func (c *Cluster) Restart(tb testing.TB) {
	tb.Helper()
	c.stop()
	if err := c.run(context.Background()); err != nil {
		tb.Fatalf("pgtest: restart: %v", err)
	}
}

// Stop shuts the server down (a fast shutdown: open connections are cut)
// and waits until it exited. Its data stays: Restart starts it again.
func (c *Cluster) Stop() { c.stop() }

// stop shuts the server down (SIGINT, a fast shutdown; SIGKILL after 30s),
// continuing it first if it is paused.
func (c *Cluster) stop() {
	c.mu.Lock()
	cmd, done, paused := c.cmd, c.done, c.paused
	c.cmd, c.paused = nil, false
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	if paused {
		_ = signalServer(cmd.Process.Pid, syscall.SIGCONT)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Close stops the server and removes its directory.
func (c *Cluster) Close() {
	c.stop()
	if !strings.HasPrefix(filepath.Base(c.dir), "pgtest-") {
		return
	}
	_ = os.RemoveAll(c.dir)
}
