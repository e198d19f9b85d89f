// Package zktest runs a real standalone ZooKeeper server (Debian's zookeeper
// package, started with java) for tests, benchmarks and demos, and a small
// TCP proxy that tests use to cut a client's connection without closing its
// session.
//
// Start is for tests and benchmarks: the server lives in tb.TempDir and is
// stopped at cleanup. StartServer is for code without a testing.TB; call
// Close when done. A missing ZooKeeper or Java install is an error (Start
// fails the test): nothing here skips.
//
// The server listens on a free 127.0.0.1 port with a 200ms tickTime, so that
// session timeouts from 400ms (2 ticks) to 120s are accepted as asked. It
// does not fsync its transaction log (forceSync=no): data survives a
// restart of the process, not of the machine. The JVM is kept lean
// (LeanJVMFlags: -Xmx256m, serial GC, C1 only) for small CI machines.
package zktest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// TickTime is the server's tickTime. The shortest session timeout it
// grants is 2*TickTime.
const TickTime = 200 * time.Millisecond

// MaxSessionTimeout is the longest session timeout the server grants.
const MaxSessionTimeout = 120 * time.Second

// readyTimeout bounds how long a start waits for the server to serve.
const readyTimeout = 60 * time.Second

// Jar is the ZooKeeper server jar of Debian's zookeeper package; its
// manifest's Class-Path names the dependencies. FENCELOCK_ZK_CLASSPATH
// overrides the whole class path.
const Jar = "/usr/share/java/zookeeper.jar"

// Option configures the server before it starts.
type Option func(c *config)

// config is what Options set: zoo.cfg entries, and TLS.
type config struct {
	entries map[string]string
	tls     *tlstest.Files
}

// WithConfig sets zoo.cfg key to value (for example "maxSessionTimeout").
// The port, address and data directory are set by the start and should not
// be changed.
func WithConfig(key, value string) Option { return func(c *config) { c.entries[key] = value } }

// StockTickTime is the tickTime of Debian's zoo.cfg (/etc/zookeeper/conf),
// as of ZooKeeper's sample configuration.
const StockTickTime = 2 * time.Second

// WithStockTimeouts gives the server the session timeout bounds of
// Debian's stock configuration: tickTime 2000 and neither
// minSessionTimeout nor maxSessionTimeout, so it grants sessions of 2 to
// 20 ticks (4s to 40s) and clamps what is asked into that range. Apply
// it after any WithConfig of those keys.
func WithStockTimeouts() Option {
	return func(c *config) {
		c.entries["tickTime"] = strconv.Itoa(int(StockTickTime / time.Millisecond))
		delete(c.entries, "minSessionTimeout")
		delete(c.entries, "maxSessionTimeout")
	}
}

// WithTLS serves clients over TLS only, with f's server certificate, and
// requires client certificates signed by f's CA (ssl.clientAuth=need): the
// port is a secureClientPort on ZooKeeper's Netty connection factory, and
// there is no plain clientPort, so that a plain client cannot get in
// through another door. Addr is the TLS port; the start's readiness check,
// Connect, ConnectTo and Monitor dial it with f's client certificate.
// The server does not check client certificates' host names
// (ssl.hostnameVerification=false: clients are not named by their
// addresses); it checks quorum peers, and a standalone server has none.
// Debian's zookeeper.jar does not name netty-codec in its class path, which
// the Netty factory needs: it is added (NettyJars).
func WithTLS(f *tlstest.Files) Option { return func(c *config) { c.tls = f } }

// NettyJars are added to the class path of a TLS server (WithTLS) unless
// FENCELOCK_ZK_CLASSPATH is set: Debian's zookeeper.jar manifest omits
// them, and without them every TLS connection fails with
// NoClassDefFoundError io/netty/handler/codec/ByteToMessageDecoder.
var NettyJars = []string{"/usr/share/java/netty-codec.jar"}

// LeanJVMFlags are the server's JVM flags: a small heap, the serial
// collector and the C1 compiler alone, for small CI machines. The
// environment variable FENCELOCK_ZK_JVM_FLAGS, when set, replaces them (a
// space-separated list; empty for the JVM's defaults, as Debian's service
// runs the server), for example to benchmark a server configured as in
// production.
var LeanJVMFlags = []string{"-Xmx256m", "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"}

// Server is a running ZooKeeper server process.
type Server struct {
	dir       string
	removeDir bool
	cfgPath   string
	logPath   string
	port      int
	tls       *tlstest.Files // WithTLS

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
	closed bool
}

// Start starts a server in a temporary directory of tb and stops it when the
// test or benchmark ends. It fails tb if the server does not start, with the
// reason (for example: ZooKeeper not installed).
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := start(tb.TempDir(), false, opts)
	if err != nil {
		tb.Fatalf("zktest: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// StartServer starts a server with its data in dir; an empty dir means a new
// temporary directory, removed by Close. Close the server when done.
func StartServer(dir string, opts ...Option) (*Server, error) {
	remove := false
	if dir == "" {
		d, err := os.MkdirTemp("", "zktest-")
		if err != nil {
			return nil, fmt.Errorf("zktest: %w", err)
		}
		dir, remove = d, true
	}
	s, err := start(dir, remove, opts)
	if err != nil {
		if remove {
			_ = os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("zktest: %w", err)
	}
	return s, nil
}

// classPath returns the class path of the installed server (with
// NettyJars if tls), or an error that says what is missing.
func classPath(tls bool) (string, error) {
	if cp := os.Getenv("FENCELOCK_ZK_CLASSPATH"); cp != "" {
		return cp, nil
	}
	if _, err := os.Stat(Jar); err != nil {
		return "", fmt.Errorf("ZooKeeper is not installed: %s is missing (install Debian's package: apt-get install zookeeper; or set FENCELOCK_ZK_CLASSPATH)", Jar)
	}
	cp := []string{Jar}
	if tls {
		for _, j := range NettyJars {
			if _, err := os.Stat(j); err != nil {
				return "", fmt.Errorf("a TLS ZooKeeper server needs %s, which is missing (apt-get install libnetty-java; or set FENCELOCK_ZK_CLASSPATH)", j)
			}
		}
		cp = append(cp, NettyJars...)
	}
	return strings.Join(cp, ":"), nil
}

func javaPath() (string, error) {
	p, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("java is not installed or not on PATH (apt-get install zookeeper pulls in a JRE): %w", err)
	}
	return p, nil
}

func start(dir string, remove bool, opts []Option) (*Server, error) {
	var probe config
	probe.entries = map[string]string{}
	for _, o := range opts {
		if o != nil {
			o(&probe)
		}
	}
	if _, err := classPath(probe.tls != nil); err != nil {
		return nil, err
	}
	if _, err := javaPath(); err != nil {
		return nil, err
	}
	var errs []error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		data, err := os.MkdirTemp(dir, "data-")
		if err != nil {
			return nil, err
		}
		cfg := map[string]string{
			"tickTime":               strconv.Itoa(int(TickTime / time.Millisecond)),
			"dataDir":                data,
			"clientPort":             strconv.Itoa(port),
			"clientPortAddress":      "127.0.0.1",
			"maxSessionTimeout":      strconv.Itoa(int(MaxSessionTimeout / time.Millisecond)),
			"admin.enableServer":     "false",
			"4lw.commands.whitelist": "*",
			"maxClientCnxns":         "0",
		}
		c := config{entries: cfg}
		for _, o := range opts {
			if o != nil {
				o(&c)
			}
		}
		if c.tls != nil {
			delete(cfg, "clientPort")
			delete(cfg, "clientPortAddress")
			cfg["secureClientPort"] = strconv.Itoa(port)
			cfg["secureClientPortAddress"] = "127.0.0.1"
			cfg["serverCnxnFactory"] = "org.apache.zookeeper.server.NettyServerCnxnFactory"
			cfg["ssl.keyStore.location"] = c.tls.ServerKeyStore
			cfg["ssl.keyStore.type"] = "PEM"
			cfg["ssl.trustStore.location"] = c.tls.CA
			cfg["ssl.trustStore.type"] = "PEM"
			cfg["ssl.clientAuth"] = "need"
			cfg["ssl.hostnameVerification"] = "false"
		}
		s := &Server{dir: dir, removeDir: remove, port: port, tls: c.tls,
			cfgPath: filepath.Join(data, "zoo.cfg"), logPath: filepath.Join(data, "zookeeper.log")}
		if err := writeConfig(s.cfgPath, cfg); err != nil {
			return nil, err
		}
		if err := s.launch(); err != nil {
			errs = append(errs, err)
			_ = os.RemoveAll(data)
			continue
		}
		return s, nil
	}
	return nil, errors.Join(errs...)
}

func writeConfig(path string, cfg map[string]string) error {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, cfg[k])
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// launch starts the java process and waits until it serves requests.
func (s *Server) launch() error {
	cp, err := classPath(s.tls != nil)
	if err != nil {
		return err
	}
	java, err := javaPath()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	jvm := LeanJVMFlags
	if v, ok := os.LookupEnv("FENCELOCK_ZK_JVM_FLAGS"); ok {
		jvm = strings.Fields(v)
	}
	cmd := exec.Command(java, append(slices.Clone(jvm),
		"-Dzookeeper.log.dir="+filepath.Dir(s.logPath),
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.forceSync=no",
		"-Dznode.container.checkIntervalMs=1000",
		"-cp", cp,
		"org.apache.zookeeper.server.ZooKeeperServerMain", s.cfgPath)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start java: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()
	if err := s.waitReady(exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return err
	}
	return nil
}

// waitReady connects and makes a real request, until it works or the server
// died or readyTimeout passed.
func (s *Server) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("the ZooKeeper server exited while starting; its log %s ends with:\n%s", s.logPath, tail(s.logPath))
		default:
		}
		if err := s.ping(2 * time.Second); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the ZooKeeper server at %s was not ready after %v: %v; log %s:\n%s", s.Addr(), readyTimeout, err, s.logPath, tail(s.logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ping opens a session (over TLS with WithTLS) and reads the root node.
func (s *Server) ping(timeout time.Duration) error {
	addr := s.Addr()
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	_ = c.Close()
	dialer := func(*zk.Conn) {}
	if s.tls != nil {
		d, err := TLSDialer(s.tls)
		if err != nil {
			return err
		}
		dialer = zk.WithDialer(d)
	}
	conn, _, err := zk.Connect([]string{addr}, 4*time.Second, zk.WithLogger(quiet{}), zk.WithLogInfo(false), dialer)
	if err != nil {
		return err
	}
	defer conn.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := conn.Exists("/")
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("no reply within %v", timeout)
	}
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Addr returns the client address, 127.0.0.1:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Monitor returns the server's monitoring figures (the "mntr" four-letter
// command), such as zk_packets_received (requests) and zk_packets_sent
// (replies and watch events), by name.
func (s *Server) Monitor() (map[string]int64, error) {
	c, err := s.dialRaw(5 * time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("mntr")); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	figures := make(map[string]int64)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				figures[f[0]] = n
			}
		}
	}
	if _, ok := figures["zk_packets_received"]; !ok {
		return nil, fmt.Errorf("zktest: mntr gave no zk_packets_received: %q", b)
	}
	return figures, nil
}

// LogPath returns the file the server's output goes to.
func (s *Server) LogPath() string { return s.logPath }

// Stop kills the server process (SIGKILL: no clean shutdown, no session is
// closed) and waits for it to exit. Data written before stays in its data
// directory; Restart brings it back on the same port.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited, paused := s.cmd, s.exited, s.paused
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	<-exited
}

// Restart stops the server if it runs and starts it again with the same
// configuration, data directory and port.
func (s *Server) Restart() error {
	s.Stop()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.launch(); err == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond) // the port may linger briefly
	}
	return fmt.Errorf("zktest: restart: %w", err)
}

// Pause stops the server process with SIGSTOP: connections stay open but
// nothing is answered. Resume continues it (sessions whose deadline passed
// meanwhile may then expire, even if their clients kept trying).
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && !s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
		s.paused = true
	}
}

// Resume continues a paused server.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
}

// Close stops the server and removes its directory if StartServer made it.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.Stop()
	if s.removeDir {
		_ = os.RemoveAll(s.dir)
	}
}

// Connect returns a client session to the server with the given session
// timeout, connected (or failed) within 30s; tb closes it at cleanup.
func (s *Server) Connect(tb testing.TB, sessionTimeout time.Duration) *zk.Conn {
	tb.Helper()
	if s.tls != nil {
		d, err := TLSDialer(s.tls)
		if err != nil {
			tb.Fatalf("zktest: %v", err)
		}
		return ConnectTo(tb, s.Addr(), sessionTimeout, zk.WithDialer(d))
	}
	return ConnectTo(tb, s.Addr(), sessionTimeout)
}

// dialRaw opens a connection to the client port, over TLS with WithTLS.
func (s *Server) dialRaw(timeout time.Duration) (net.Conn, error) {
	if s.tls == nil {
		return net.DialTimeout("tcp", s.Addr(), timeout)
	}
	d, err := TLSDialer(s.tls)
	if err != nil {
		return nil, err
	}
	return d("tcp", s.Addr(), timeout)
}

// TLSDialer returns a zk.Dialer that connects over TLS with f's client
// certificate, trusting f's CA, for a server started WithTLS (whose
// certificate names 127.0.0.1). The handshake is done within the dial's
// timeout.
func TLSDialer(f *tlstest.Files) (zk.Dialer, error) {
	tc, err := f.ClientConfig()
	if err != nil {
		return nil, err
	}
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		c := tc.Clone()
		c.ServerName = host
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, addr, c)
		if err != nil {
			return nil, err
		}
		return conn, nil
	}, nil
}

// ConnectTo is Connect for any address (a Proxy's, for example).
func ConnectTo(tb testing.TB, addr string, sessionTimeout time.Duration, opts ...func(*zk.Conn)) *zk.Conn {
	tb.Helper()
	conn, err := dial(addr, sessionTimeout, opts...)
	if err != nil {
		tb.Fatalf("zktest: %v", err)
	}
	tb.Cleanup(conn.Close)
	return conn
}

func dial(addr string, sessionTimeout time.Duration, opts ...func(*zk.Conn)) (*zk.Conn, error) {
	all := func(c *zk.Conn) {
		for _, o := range opts {
			o(c)
		}
	}
	conn, _, err := zk.Connect([]string{addr}, sessionTimeout, zk.WithLogger(quiet{}), zk.WithLogInfo(false), all)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for conn.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			conn.Close()
			return nil, fmt.Errorf("no session with %s within 30s", addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return conn, nil
}

// Quiet is a zk.Logger that discards go-zookeeper's log lines.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// Quiet returns a zk.Logger that discards everything.
func Quiet() zk.Logger { return quiet{} }
