// Package redistest runs real redis-server processes for tests, benchmarks
// and demos: a standalone server on a free 127.0.0.1 port, replicas of it,
// and the faults the Redis adapter's tests need (SIGKILL, restart on the
// same port with or without persistence, promotion of a replica).
//
// Start is for tests and benchmarks: the server lives in tb.TempDir and is
// stopped at cleanup. StartServer is for code without a testing.TB; call
// Close when done.
//
// The binary is $REDIS_SERVER if set, else redis-server on $PATH, else
// /usr/bin/redis-server (Debian's package). A missing binary is an error
// (Start fails the test) that says how to install it: the adapter's tests
// never skip.
//
// By default the server keeps nothing on disk (--save "" --appendonly no),
// so a restart loses every key; WithPersistence turns on an fsync-always
// append-only file, so a restart (even after SIGKILL) keeps every
// acknowledged write.
//
// WithTLS serves clients over TLS only, with client certificates required
// (redis-server built with TLS, as Debian's is).
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// readyTimeout bounds how long a start waits for the server to answer PING.
const readyTimeout = 15 * time.Second

// startAttempts is how often a start retries on a port taken between picking
// and binding it.
const startAttempts = 5

// Option adjusts a server before it starts.
type Option func(*config)

type config struct {
	persist   bool
	replicaOf string
	tls       *tlstest.Files
	args      []string
	// cluster: a Redis Cluster node (see StartCluster); sentinel: the
	// Sentinel configuration's lines (see StartSentinels).
	cluster  bool
	sentinel []string
}

// WithPersistence keeps the data in an append-only file fsynced on every
// write, so a Restart (even after Kill) keeps every acknowledged write.
func WithPersistence() Option { return func(c *config) { c.persist = true } }

// WithReplicaOf starts the server as a replica of the server at addr.
func WithReplicaOf(addr string) Option { return func(c *config) { c.replicaOf = addr } }

// WithTLS serves clients over TLS only, on Addr (no plain port), with
// f's server certificate, and requires client certificates signed by f's CA
// (tls-auth-clients yes). The package's own clients (the readiness check,
// NewClient, the replication helpers) present f's client certificate. With
// WithReplicaOf, replication runs over TLS too (tls-replication yes): the
// replica checks the primary's certificate against f's CA and presents f's
// client certificate, so primary and replica must share f.
func WithTLS(f *tlstest.Files) Option { return func(c *config) { c.tls = f } }

// WithArgs adds redis-server command-line arguments ("--maxmemory", "10mb").
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Server is one redis-server process (or, after Kill, the place where one
// ran: Restart starts it again on the same port and directory).
type Server struct {
	bin       string
	dir       string
	port      int
	busPort   int // a cluster node's cluster bus port
	cfg       config
	clientTLS *tls.Config // for WithTLS
	rm        bool        // remove dir on Close

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	closed bool
	admin  *goredis.Client // the package's own client (see client)
}

// Binary returns the redis-server binary the package runs, or an error that
// says how to install it.
func Binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server", nil
	}
	return "", errors.New("redistest: redis-server not found (set REDIS_SERVER, or install it: apt-get install redis-server)")
}

// Start starts a server in a temporary directory of tb and stops it when the
// test or benchmark ends. It fails tb if the server does not start (a
// missing redis-server included).
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := startIn(tb.TempDir(), false, opts)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// StartServer starts a server in a new temporary directory, removed by
// Close. Close the server when done.
func StartServer(opts ...Option) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s, err := startIn(dir, true, opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return s, nil
}

// StartReplica starts a replica of primary in a temporary directory of tb,
// waits until its link to primary is up and the initial sync is done, and
// stops it when the test ends.
func StartReplica(tb testing.TB, primary *Server, opts ...Option) *Server {
	tb.Helper()
	r := Start(tb, append(opts, WithReplicaOf(primary.Addr()))...)
	if err := r.waitLinkUp(readyTimeout); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	// After a diskless sync the primary counts the replica (for WAIT) only
	// once it has sent its first ACK, up to a second later.
	if err := primary.waitReplicaOnline(r, readyTimeout); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return r
}

func (s *Server) waitReplicaOnline(r *Server, d time.Duration) error {
	c := goredis.NewClient(s.options(0))
	defer c.Close()
	want := "port=" + strconv.Itoa(r.port) + ",state=online"
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Contains(info, want) {
			// And it acknowledges writes: WAIT answers for it.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			n, err := c.Incr(ctx, "redistest:replica-check").Result()
			if err == nil {
				n, err = c.Do(ctx, "WAIT", 1, 500).Int64()
			}
			cancel()
			if err == nil && n >= 1 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("primary on port %d does not list replica %d online within %v (%v)", s.port, r.port, d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startIn(dir string, rm bool, opts []Option) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	var clientTLS *tls.Config
	if cfg.tls != nil {
		if clientTLS, err = cfg.tls.ClientConfig(); err != nil {
			return nil, err
		}
	}
	var errs []error
	for range startAttempts {
		port, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		s := &Server{bin: bin, dir: dir, port: port, cfg: cfg, clientTLS: clientTLS, rm: rm}
		if cfg.cluster {
			if s.busPort, err = freeport.Port(); err != nil {
				return nil, err
			}
		}
		err = s.start()
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// args is the command line of the server.
func (s *Server) args() ([]string, error) {
	if s.cfg.sentinel != nil {
		return s.sentinelArgs()
	}
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--save", "",
		"--logfile", s.LogPath(),
		"--enable-debug-command", "local",
		// Replicas sync at once instead of after the default 5s delay.
		"--repl-diskless-sync-delay", "0",
	}
	if f := s.cfg.tls; f != nil {
		// The last --port wins: no plain port.
		a = append(a, "--port", "0", "--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey,
			"--tls-ca-cert-file", f.CA, "--tls-auth-clients", "yes")
	}
	if s.cfg.persist {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--appendonly", "no")
	}
	if s.cfg.cluster {
		a = append(a, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(s.busPort),
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout.Milliseconds())))
		if s.cfg.tls != nil {
			// The cluster bus over TLS too.
			a = append(a, "--tls-cluster", "yes")
		}
	}
	if f := s.cfg.tls; f != nil {
		// Replication over TLS, with the client certificate the servers
		// want of each other: for every server, not only one started as a
		// replica, since a primary becomes one after a failover (without
		// it, a TLS Sentinel deployment's former primary never synced from
		// the promoted one).
		a = append(a, "--tls-replication", "yes",
			"--tls-client-cert-file", f.ClientCert, "--tls-client-key-file", f.ClientKey)
	}
	s.mu.Lock()
	replicaOf := s.cfg.replicaOf // RestartReplicaOf sets it
	s.mu.Unlock()
	if replicaOf != "" {
		host, port, _ := net.SplitHostPort(replicaOf)
		a = append(a, "--replicaof", host, port)
	}
	return append(a, s.cfg.args...), nil
}

// start runs the process and waits for PING.
func (s *Server) start() error {
	args, err := s.args()
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	// The server dies with the test binary, even when it panics on a
	// -timeout or is killed (then no clean-up runs), as zktest's do.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	c := goredis.NewClient(s.options(time.Second))
	defer c.Close()
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited while starting (%s)", s.port, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %v (%s)", s.port, readyTimeout, err, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return nil
}

// logTail returns the last lines of the server log, for error messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.LogPath())
	if err != nil {
		return "no log"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return "log: " + strings.Join(lines, " | ")
}

// options are the package's client options for the server: no retries,
// TLS with the client certificate for WithTLS, dial timeout d (0: go-redis's
// default).
func (s *Server) options(d time.Duration) *goredis.Options {
	o := &goredis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: d}
	if s.clientTLS != nil {
		o.TLSConfig = s.clientTLS.Clone()
	}
	return o
}

// Addr returns host:port of the server (its TLS port with WithTLS).
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir returns the server's working directory (logs, append-only file).
func (s *Server) Dir() string { return s.dir }

// LogPath returns the server's log file.
func (s *Server) LogPath() string { return filepath.Join(s.dir, "redis-"+strconv.Itoa(s.port)+".log") }

// NewClient returns a client of the server (no retries, so faults surface at
// once), closed when tb ends.
func (s *Server) NewClient(tb testing.TB) *goredis.Client {
	c := goredis.NewClient(s.options(0))
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill sends SIGKILL and waits for the process to exit. Nothing is saved
// beyond what persistence already wrote.
func (s *Server) Kill() { s.stop(syscall.SIGKILL) }

// Stop sends SIGTERM and waits for the process to exit (a clean shutdown).
func (s *Server) Stop() { s.stop(syscall.SIGTERM) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Pause stops the process with SIGSTOP: it neither answers clients nor
// replicates until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: server not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Restart kills the server if it runs (SIGKILL, as a crash) and starts it
// again on the same port and directory, with the same configuration. Without
// WithPersistence it comes back empty.
func (s *Server) Restart() error {
	s.Kill()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errors.New("redistest: Restart after Close")
	}
	if err := s.start(); err != nil {
		return fmt.Errorf("redistest: restart: %w", err)
	}
	return nil
}

// RestartReplicaOf is Restart, but the server comes back as a replica of
// the server at addr, or as a primary if addr is "", whatever it was
// started as; later Restarts keep that role. (A server started with a
// configuration file keeps a REPLICAOF it was sent there through CONFIG
// REWRITE, as Sentinel asks; a Server has no configuration file: see
// RestartRole.)
func (s *Server) RestartReplicaOf(addr string) error {
	s.mu.Lock()
	s.cfg.replicaOf = addr
	s.mu.Unlock()
	return s.Restart()
}

// Promote turns a replica into a primary (REPLICAOF NO ONE), as a failover
// does; it stops replicating at once, so writes its primary accepts from now
// on never reach it.
func (s *Server) Promote(ctx context.Context) error {
	c := goredis.NewClient(s.options(0))
	defer c.Close()
	return c.ReplicaOf(ctx, "NO", "ONE").Err()
}

// WaitReplicated waits until replica has processed everything primary has
// written so far (equal replication offsets).
func WaitReplicated(ctx context.Context, primary, replica *Server) error {
	p := goredis.NewClient(primary.options(0))
	defer p.Close()
	r := goredis.NewClient(replica.options(0))
	defer r.Close()
	for {
		po, err1 := offset(ctx, p, "master_repl_offset")
		ro, err2 := offset(ctx, r, "slave_repl_offset")
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if po == ro && po > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: replica offset %d, primary %d: %w", ro, po, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func offset(ctx context.Context, c *goredis.Client, field string) (int64, error) {
	v, err := InfoField(ctx, c, field)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// InfoField returns one field of c's INFO replication.
func InfoField(ctx context.Context, c *goredis.Client, field string) (string, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("redistest: no %s in INFO replication", field)
}

func (s *Server) waitLinkUp(d time.Duration) error {
	c := goredis.NewClient(s.options(0))
	defer c.Close()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := InfoField(ctx, c, "master_link_status")
		cancel()
		if err == nil && v == "up" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica on port %d: link to its primary not up within %v (%v %q)", s.port, d, err, v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close stops the server (SIGKILL: nothing in it matters any more) and, for
// a server from StartServer, removes its directory. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	_ = s.Resume()
	s.Kill()
	s.mu.Lock()
	if s.admin != nil {
		_ = s.admin.Close()
	}
	s.mu.Unlock()
	if s.rm {
		_ = os.RemoveAll(s.dir)
	}
}

// SetUser creates (or replaces) the ACL user name with password and rules
// (ACL SETUSER name reset on >password rules...: it starts with no
// permission at all) and deletes it when tb ends.
func (s *Server) SetUser(tb testing.TB, name, password string, rules ...string) {
	tb.Helper()
	c := goredis.NewClient(s.options(0))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := append([]any{"ACL", "SETUSER", name, "reset", "on", ">" + password}, toAny(rules)...)
	if err := c.Do(ctx, args...).Err(); err != nil {
		tb.Fatalf("redistest: ACL SETUSER %s: %v", name, err)
	}
	tb.Cleanup(func() {
		c := goredis.NewClient(s.options(0))
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Do(ctx, "ACL", "DELUSER", name).Err()
	})
}

func toAny(ss []string) []any {
	a := make([]any, len(ss))
	for i, s := range ss {
		a[i] = s
	}
	return a
}
