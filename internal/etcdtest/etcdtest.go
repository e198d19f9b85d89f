// Package etcdtest runs a real, single-member etcd server in-process
// (go.etcd.io/etcd/server/v3/embed) for tests, benchmarks and demos.
//
// Start is for tests and benchmarks: the server lives in tb.TempDir and is
// stopped at cleanup. StartServer is for code without a testing.TB (the CLI
// demo); call Close when done.
//
// The server listens on free 127.0.0.1 ports, logs only errors (to etcd.log
// in its data directory, see LogPath), and by
// default does not fsync (durability does not matter to a throwaway server,
// and fsync would dominate test time on slow disks); WithFsync turns fsync
// back on for measurements that should pay what a real cluster pays.
// WithClientTLS serves clients over TLS (https) with client certificates
// required. WithAuth turns authentication on, with a root user and users of
// given key-prefix grants.
package etcdtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// readyTimeout bounds how long Start waits for the server to be ready.
const readyTimeout = 30 * time.Second

// startAttempts is how often Start retries when a port it picked was taken
// between picking and listening.
const startAttempts = 5

// Server is a running embedded etcd server.
type Server struct {
	endpoints []string
	clientTLS *tls.Config // for WithClientTLS
	dir       string
	removeDir bool
	logPath   string
	member    string    // the member's data directory
	auth      *authSpec // for WithAuth
	ports     [2]int    // client and peer ports, the same over a Restart
	opts      []Option  // as started

	mu      sync.Mutex
	etcd    *embed.Etcd
	stopped bool
	closed  bool
}

// LogPath returns the file the server logs its errors to.
func (s *Server) LogPath() string { return s.logPath }

// Option adjusts the server's configuration before it starts.
type Option func(*options)

type options struct {
	cfg  *embed.Config
	tls  *tlstest.Files
	auth *authSpec
}

type authSpec struct {
	rootPassword string
	users        []User
}

// RootUser is the name of the user that WithAuth makes the server's
// administrator.
const RootUser = "root"

// User is a user that WithAuth creates, with a role of the same name that
// may read and write each key prefix in ReadWrite and nothing else: what
//
//	etcdctl role add NAME
//	etcdctl role grant-permission NAME readwrite --prefix P   (each P)
//	etcdctl user add NAME
//	etcdctl user grant-role NAME NAME
//
// give. A user with no ReadWrite has a role without permissions.
type User struct {
	Name, Password string   // the user's credentials; Name also names its role
	ReadWrite      []string // the key prefixes the role may read and write
}

// WithFsync makes the server fsync its write-ahead log as a production
// server does (the default here is no fsync).
func WithFsync() Option { return func(o *options) { o.cfg.UnsafeNoFsync = false } }

// WithConfig lets the caller change any embed.Config field (for example the
// election timeout, which decides the minimum lease TTL). Ports, directory and
// cluster membership are set by Start and should not be changed.
func WithConfig(f func(*embed.Config)) Option { return func(o *options) { f(o.cfg) } }

// WithClientTLS serves clients over TLS only (https:// endpoints) with f's
// server certificate, and requires client certificates signed by f's CA
// (etcd's --client-cert-auth). Clients of NewClient and Client present f's
// client certificate. Peers stay plain.
func WithClientTLS(f *tlstest.Files) Option { return func(o *options) { o.tls = f } }

// WithAuth enables authentication (etcdctl auth enable) once the server has
// started, with the user RootUser (password rootPassword, role root) and
// users. Client and NewClient authenticate as RootUser. Passwords are hashed
// with bcrypt's minimum cost, so that authenticating costs tests little.
func WithAuth(rootPassword string, users ...User) Option {
	return func(o *options) {
		o.auth = &authSpec{rootPassword: rootPassword, users: users}
		o.cfg.BcryptCost = 4 // bcrypt.MinCost
	}
}

// Start starts a server in a temporary directory of tb and stops it when the
// test or benchmark ends. It fails tb if the server does not start.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := start(tb.TempDir(), false, opts)
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// StartServer starts a server with its data in a new subdirectory of dir; an
// empty dir means a new temporary directory, removed by Close. Close the
// server when done.
func StartServer(dir string, opts ...Option) (*Server, error) {
	remove := false
	if dir == "" {
		d, err := os.MkdirTemp("", "etcdtest-")
		if err != nil {
			return nil, fmt.Errorf("etcdtest: %w", err)
		}
		dir, remove = d, true
	}
	s, err := start(dir, remove, opts)
	if err != nil {
		if remove {
			_ = os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	return s, nil
}

func start(dir string, remove bool, opts []Option) (*Server, error) {
	var errs []error
	for attempt := 0; attempt < startAttempts; attempt++ {
		// A fresh data directory per attempt: a failed start may leave a
		// half-initialised member behind.
		member, err := os.MkdirTemp(dir, "member-")
		if err != nil {
			return nil, err
		}
		ports, err := freeport.Ports(2)
		if err != nil {
			return nil, err
		}
		s, err := startOnce(member, [2]int{ports[0], ports[1]}, opts)
		if err == nil {
			s.dir, s.removeDir = dir, remove
			if err := s.enableAuth(); err != nil {
				s.Close()
				return nil, err
			}
			return s, nil
		}
		errs = append(errs, err)
		_ = os.RemoveAll(member)
		if !isAddrInUse(err) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func startOnce(dir string, ports [2]int, opts []Option) (*Server, error) {
	var err error
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}

	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	cfg.LogLevel = "error"
	// Errors go to a file in the data directory: stopping the server logs a
	// few "server closed" errors that would only clutter test output.
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	cfg.EnableGRPCGateway = false
	cfg.SnapshotCount = 5000
	cfg.UnsafeNoFsync = true
	o := options{cfg: cfg}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	var clientTLS *tls.Config
	if f := o.tls; f != nil {
		if clientTLS, err = f.ClientConfig(); err != nil {
			return nil, err
		}
		clientURL.Scheme = "https"
		cfg.ListenClientUrls = []url.URL{clientURL}
		cfg.AdvertiseClientUrls = []url.URL{clientURL}
		cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = f.ServerCert, f.ServerKey
		cfg.ClientTLSInfo.TrustedCAFile = f.CA
		cfg.ClientTLSInfo.ClientCertAuth = true
		// What the server presents if it dials its own client URL.
		cfg.ClientTLSInfo.ClientCertFile, cfg.ClientTLSInfo.ClientKeyFile = f.ClientCert, f.ClientKey
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("server failed while starting: %w", err)
	case <-time.After(readyTimeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("server not ready after %v", readyTimeout)
	}
	return &Server{etcd: e, endpoints: []string{clientURL.String()}, clientTLS: clientTLS, logPath: cfg.LogOutputs[0],
		member: dir, ports: ports, opts: opts, auth: o.auth}, nil
}

// enableAuth creates WithAuth's users and roles and enables authentication,
// on a server just started on empty data (a Restart keeps them).
func (s *Server) enableAuth() error {
	if s.auth == nil {
		return nil
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second,
		Logger: s.Etcd().GetLogger(), TLS: s.clientTLS.Clone()})
	if err != nil {
		return fmt.Errorf("auth: new client: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if _, err := c.UserAdd(ctx, RootUser, s.auth.rootPassword); err != nil {
		return fmt.Errorf("auth: add %s: %w", RootUser, err)
	}
	if _, err := c.UserGrantRole(ctx, RootUser, "root"); err != nil {
		return fmt.Errorf("auth: grant root: %w", err)
	}
	for _, u := range s.auth.users {
		if _, err := c.RoleAdd(ctx, u.Name); err != nil {
			return fmt.Errorf("auth: add role %s: %w", u.Name, err)
		}
		for _, p := range u.ReadWrite {
			if _, err := c.RoleGrantPermission(ctx, u.Name, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
				return fmt.Errorf("auth: grant %s readwrite on prefix %q: %w", u.Name, p, err)
			}
		}
		if _, err := c.UserAdd(ctx, u.Name, u.Password); err != nil {
			return fmt.Errorf("auth: add user %s: %w", u.Name, err)
		}
		if _, err := c.UserGrantRole(ctx, u.Name, u.Name); err != nil {
			return fmt.Errorf("auth: grant role %s: %w", u.Name, err)
		}
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		return fmt.Errorf("auth: enable: %w", err)
	}
	return nil
}

func isAddrInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}

// Endpoints returns the client URLs to dial (one, http://127.0.0.1:port, or
// https:// with WithClientTLS).
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// Etcd returns the embedded server, for tests that need to reach into it
// (a new one after each Restart).
func (s *Server) Etcd() *embed.Etcd {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.etcd
}

// Stop stops the server and keeps its data, until Restart. It is
// idempotent. The server runs in this process, so this is the closest it
// comes to a crash too: it cannot be killed or paused.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if !s.stopped {
		s.etcd.Close()
		s.stopped = true
	}
}

// Restart stops the server if it runs and starts it again on the same data
// directory and ports, with the options it was started with, and waits
// until it is ready.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("etcdtest: restart of a closed server")
	}
	s.stopLocked()
	n, err := startOnce(s.member, s.ports, s.opts)
	if err != nil {
		return fmt.Errorf("etcdtest: restart: %w", err)
	}
	s.etcd, s.stopped = n.etcd, false
	return nil
}

// NewClient returns a client of the server that is closed when tb ends.
func (s *Server) NewClient(tb testing.TB) *clientv3.Client {
	tb.Helper()
	c, err := s.Client()
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Client returns a new client of the server; the caller closes it. With
// WithAuth it authenticates as RootUser.
func (s *Server) Client() (*clientv3.Client, error) {
	return s.ClientAs("", "")
}

// ClientAs returns a new client of the server that authenticates as user
// with password, or, for an empty user, as RootUser if WithAuth enabled
// authentication (as nobody otherwise); the caller closes it.
func (s *Server) ClientAs(user, password string) (*clientv3.Client, error) {
	if user == "" && s.auth != nil {
		user, password = RootUser, s.auth.rootPassword
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      s.Etcd().GetLogger(), // the server's, at error level
		TLS:         s.clientTLS.Clone(),
		Username:    user,
		Password:    password,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdtest: new client: %w", err)
	}
	return c, nil
}

// Close stops the server and, for a server of StartServer with no directory
// given, removes its data. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.stopLocked()
	if s.removeDir {
		_ = os.RemoveAll(s.dir)
	}
}
