package zookeeper

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// DefaultPrefix is the node under which locks live when no prefix is given.
const DefaultPrefix = "/fencelock"

// DefaultSessionTimeout is the session timeout Dial asks for when
// Config.SessionTimeout is zero.
const DefaultSessionTimeout = 10 * time.Second

// DefaultDialTimeout bounds Dial's wait for its first session (and Open's,
// for a URL without dial_timeout) when Config.DialTimeout is zero.
const DefaultDialTimeout = 10 * time.Second

// MinTTL is the shortest TTL (session timeout) the adapter asks a server
// for (ttlLimits.Min), in whole milliseconds. The server grants at least its minSessionTimeout
// (2*tickTime: 4s with the default tickTime of 2s); a TTL it raises is
// rejected with an error matching backend.ErrInvalidOption that names what
// it granted.
const MinTTL = 400 * time.Millisecond

// ttlLimits are the adapter's TTL limits, from which its Capabilities, its
// URLs' Limits and its CheckTTL derive (its suite profile asks the
// server): at least MinTTL, in whole milliseconds, at most what a session
// timeout holds (an int32 of milliseconds), 4s on a server with default
// settings.
var ttlLimits = driver.TTLLimits{Min: MinTTL, Granularity: time.Millisecond, ServerDefaultMin: 4 * time.Second,
	Max: (1<<31 - 1) * time.Millisecond, Counted: "ZooKeeper session timeouts"}

// newConnWait bounds how long New waits for the given Conn's first session.
const newConnWait = 10 * time.Second

// pollInterval is how often a Locker over a caller's Conn (New) looks at the
// Conn's state, since the Conn's events go to the caller.
const pollInterval = 25 * time.Millisecond

var errConnClosed = errors.New("zookeeper: connection closed")

// errDialTimeout is the cause of a dial's context when the dial timeout
// ends it.
var errDialTimeout = errors.New("dial timeout")

// Config holds the adapter's own settings; the zero Config is the default
// of every field. New, over a connection of the caller's, reads Prefix
// only: the other fields configure the sessions that Dial opens, and New
// rejects a Config that sets one (backend.ErrInvalidOption).
type Config struct {
	// Servers are the ensemble's host:port addresses (port 2181 if
	// omitted). Dial needs at least one.
	Servers []string
	// Prefix is the node under which lock nodes live (absolute path; ""
	// means DefaultPrefix). go-zookeeper has no chroot: the prefix plays
	// that part.
	Prefix string
	// SessionTimeout is the session timeout asked for the Locker's first
	// session; the server's granted value becomes the Locker's default TTL.
	// Zero means DefaultSessionTimeout; otherwise it must be a TTL the
	// adapter takes (at least MinTTL, whole milliseconds), or Dial fails
	// with an error matching backend.ErrInvalidOption.
	SessionTimeout time.Duration
	// User and Password, if User is set, authenticate every session with
	// the digest scheme, and every node the Locker creates gets the ACL
	// auth:PermAll (only clients with the same credentials can read,
	// write, create under or delete it).
	User, Password string
	// DialTimeout bounds how long Dial waits for the first session, its
	// digest authentication included, context deadline or not; zero means
	// DefaultDialTimeout. A dial that times out says what it saw: a
	// refused connection, a server that accepted and never answered, one
	// that closed the connection at once (a TLS port, for a plain Config).
	DialTimeout time.Duration
	// Dialer, if set, opens the TCP connections (zk.WithDialer).
	Dialer zk.Dialer
	// TLS, if set, makes every connection, to every server and on every
	// reconnection, a TLS connection with this configuration (over
	// Dialer's, if set), the handshake done within go-zookeeper's connect
	// timeout (1s). An empty ServerName means the host of the server being
	// dialled, as written in Servers (a DNS name, or an IP address that the
	// certificate's IP SANs must list): the names are resolved at each dial
	// rather than once. go-zookeeper retries failed connections forever, so
	// Dial counts TLS failures (a failed handshake other than a timeout, or
	// a TLS alert before the server's first reply, such as a refused client
	// certificate): once every server has failed one round in a row, Dial
	// gives up with the TLS error rather than wait for ctx.
	TLS *tls.Config
}

// dialOnly names the fields of c that only Dial reads, set in c.
func (c Config) dialOnly() []string {
	var set []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"Servers", len(c.Servers) > 0}, {"SessionTimeout", c.SessionTimeout != 0}, {"User", c.User != ""},
		{"Password", c.Password != ""}, {"DialTimeout", c.DialTimeout != 0}, {"Dialer", c.Dialer != nil}, {"TLS", c.TLS != nil},
	} {
		if f.set {
			set = append(set, f.name)
		}
	}
	return set
}

// Dial opens a Locker that owns its ZooKeeper sessions: one per distinct
// TTL in use, the first (cfg.SessionTimeout) opened now. It is the way to
// let the Locker own its connections; New shares one of the caller's. The
// negotiated timeout of that session is the Locker's default TTL (opts may
// override it, as with backend.New). go-zookeeper's own log lines go to
// the logger of backend.WithLogger among opts, as for backend.Open (see
// the package documentation, "Client logs"). Close closes the sessions,
// which deletes whatever ephemeral node is left.
func Dial(ctx context.Context, cfg Config, opts ...backend.Option) (*backend.Locker, error) {
	d, err := dialDriver(ctx, cfg, backend.LoggerOf(opts...))
	if err != nil {
		return nil, err
	}
	return backend.New(d, opts...)
}

// New returns a Locker over conn, an existing connection whose session it
// shares with the caller, with the adapter's settings cfg: only its Prefix
// applies (the zero Config is the default), the fields that configure
// Dial's sessions are an error matching backend.ErrInvalidOption. The
// session's negotiated timeout is the only TTL it can honour: it is the
// Locker's default TTL, and any other TTL is rejected with
// backend.ErrInvalidOption. Nodes get the open ACL (world:anyone).
// go-zookeeper's log lines for conn go where conn sends them (zk.WithLogger
// when it was connected). Closing the Locker releases its locks but does
// not close conn.
func New(conn *zk.Conn, cfg Config, opts ...backend.Option) (*backend.Locker, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: zookeeper: nil conn", backend.ErrInvalidOption)
	}
	if set := cfg.dialOnly(); len(set) > 0 {
		return nil, fmt.Errorf("%w: zookeeper: New shares the caller's conn and reads only Config.Prefix; %s configure Dial's sessions",
			backend.ErrInvalidOption, strings.Join(set, ", "))
	}
	p, err := cleanPrefix(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: zookeeper: %v", backend.ErrInvalidOption, err)
	}
	timeout, err := NegotiatedTimeout(conn, newConnWait)
	if err != nil {
		return nil, err
	}
	s := newSession(false)
	s.conn, s.quit = conn, connQuit(conn)
	s.observe(conn.State())
	s.stopPoll = make(chan struct{})
	go s.poll(pollInterval)
	d := newDriver(p, zk.WorldACL(zk.PermAll))
	d.given, d.defaultTTL = s, timeout
	d.sessions[timeout] = s
	return backend.New(d, opts...)
}

// zkDriver implements driver.Driver.
type zkDriver struct {
	cfg        Config       // Dial only
	logger     *slog.Logger // Dial only: go-zookeeper's lines, or nil: dropped
	prefix     string
	acl        []zk.ACL
	given      *session // New: the caller's Conn
	defaultTTL time.Duration
	closing    chan struct{}
	childReads atomic.Int64 // getChildren requests of acquisitions, for tests

	hintMu    sync.Mutex
	contended map[string]struct{} // lock directories whose last acquisition here waited

	mu       sync.Mutex
	closed   bool
	sessions map[time.Duration]*session      // by TTL = negotiated timeout
	dialing  map[time.Duration]chan struct{} // closed when a dial ends
	refused  map[time.Duration]time.Duration // asked TTL -> what the server granted
}

func newDriver(prefix string, acl []zk.ACL) *zkDriver {
	return &zkDriver{prefix: prefix, acl: acl, closing: make(chan struct{}),
		sessions: make(map[time.Duration]*session), dialing: make(map[time.Duration]chan struct{}),
		refused: make(map[time.Duration]time.Duration)}
}

// maxContendedHints bounds the number of lock directories a driver
// remembers as contended; past it, further ones are not remembered (their
// acquisitions use the Multi, as for a free lock).
const maxContendedHints = 1024

// wasContended reports whether the last acquisition of the lock in dir
// through this driver had to wait: the next one likely will too, and then
// creates its node with a plain create (see lease.create).
func (d *zkDriver) wasContended(dir string) bool {
	d.hintMu.Lock()
	defer d.hintMu.Unlock()
	_, ok := d.contended[dir]
	return ok
}

// noteContended records whether an acquisition of the lock in dir waited.
func (d *zkDriver) noteContended(dir string, waited bool) {
	d.hintMu.Lock()
	defer d.hintMu.Unlock()
	switch {
	case !waited:
		delete(d.contended, dir)
	case d.contended == nil:
		d.contended = map[string]struct{}{dir: {}}
	case len(d.contended) < maxContendedHints:
		d.contended[dir] = struct{}{}
	}
}

func dialDriver(ctx context.Context, cfg Config, logger *slog.Logger) (*zkDriver, error) {
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("%w: zookeeper: no servers", backend.ErrInvalidOption)
	}
	p, err := cleanPrefix(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: zookeeper: %v", backend.ErrInvalidOption, err)
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if err := ttlLimits.Check(cfg.SessionTimeout); err != nil {
		return nil, fmt.Errorf("%w: zookeeper: session timeout: %v", backend.ErrInvalidOption, err)
	}
	acl := zk.WorldACL(zk.PermAll)
	if cfg.User != "" {
		acl = zk.AuthACL(zk.PermAll)
	}
	if cfg.DialTimeout < 0 {
		return nil, fmt.Errorf("%w: zookeeper: negative dial timeout %v", backend.ErrInvalidOption, cfg.DialTimeout)
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	d := newDriver(p, acl)
	d.cfg, d.logger = cfg, logger
	dctx, cancel := context.WithTimeoutCause(ctx, cfg.DialTimeout, errDialTimeout)
	defer cancel()
	s, err := d.dial(dctx, cfg.SessionTimeout, true)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return nil, err
	}
	d.defaultTTL = s.timeout()
	d.sessions[d.defaultTTL] = s
	return d, nil
}

// timeout returns the negotiated timeout of the current generation.
func (s *session) timeout() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen == nil {
		return 0
	}
	return s.gen.timeout
}

// dial opens a session asking for timeout ttl and waits for it. Unless
// anyTimeout, a server that grants another timeout is refused.
func (d *zkDriver) dial(ctx context.Context, ttl time.Duration, anyTimeout bool) (*session, error) {
	s := newSession(true)
	logger := zkLogger{d.logger}
	var td *tlsDialer
	if d.cfg.TLS != nil {
		td = newTLSDialer(d.cfg.TLS, d.cfg.Dialer, len(d.cfg.Servers))
	}
	watch := newDialWatch()
	setup := func(c *zk.Conn) {
		s.conn = c
		dial := d.cfg.Dialer
		if dial == nil {
			dial = net.DialTimeout
		}
		if td != nil {
			td.tcp = watch.wrap(dial)
			dial = td.dial
			zk.WithHostProvider(&namedHosts{})(c)
		} else {
			dial = watch.wrap(dial)
		}
		zk.WithDialer(buffered(dial))(c)
	}
	if _, _, err := zk.Connect(d.cfg.Servers, ttl, zk.WithLogger(logger), zk.WithLogInfo(false),
		zk.WithEventCallback(s.onEvent), setup); err != nil {
		return nil, fmt.Errorf("%w: zookeeper: connect: %w", backend.ErrUnavailable, err) // a host name that does not resolve
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		// Without TLS, failed is nil; with TLS, closedEarly is (the
		// handshake's failure is the TLS dialer's to count).
		var failed <-chan struct{}
		closedEarly := watch.closedEarly
		if td != nil {
			failed, closedEarly = td.failed, nil
		}
		select {
		case <-failed:
			cancel(fmt.Errorf("every server failed TLS: %w", td.lastErr()))
		case addr := <-closedEarly:
			// A plain client at a TLS port: the server closes the
			// connection without a word.
			if urlkit.SpeaksTLS(wctx, addr) {
				cancel(errors.New(urlkit.PlainToTLSHint(addr, "zks")))
			}
		case <-wctx.Done():
		}
	}()
	g, err := s.current(wctx)
	if err != nil {
		// No session was opened: nothing to close on the server, and
		// go-zookeeper's Close would wait a second for one.
		s.abandon()
		tlsFailed := false
		if cause := context.Cause(wctx); ctx.Err() == nil && cause != nil {
			err, tlsFailed = cause, true // a TLS failure, or a plain client at a TLS port
		} else {
			if errors.Is(context.Cause(ctx), errDialTimeout) {
				err = fmt.Errorf("no session within dial_timeout %v: %w", d.cfg.DialTimeout, err)
			}
			why := watch.why()
			if td != nil {
				why = cmp.Or(td.lastErr(), why)
			}
			if why != nil {
				err = fmt.Errorf("%w (%v)", err, why)
			}
		}
		if !tlsFailed && !errors.Is(err, errConnClosed) {
			// No TLS failure: the ensemble did not answer in time.
			return nil, fmt.Errorf("%w: zookeeper: no session with %v: %w", backend.ErrUnavailable, d.cfg.Servers, err)
		}
		return nil, fmt.Errorf("zookeeper: no session with %v: %w", d.cfg.Servers, err)
	}
	if d.cfg.User != "" {
		auth := []byte(d.cfg.User + ":" + d.cfg.Password)
		if err := call(ctx, func() error { return s.conn.AddAuth("digest", auth) }); err != nil {
			s.abandon()
			return nil, fmt.Errorf("zookeeper: add digest auth: %w", mapErr(err))
		}
	}
	if g.timeout <= 0 {
		s.close()
		return nil, errors.New("zookeeper: cannot read the negotiated session timeout from this go-zookeeper version")
	}
	if !anyTimeout && g.timeout != ttl {
		s.close()
		d.mu.Lock()
		d.refused[ttl] = g.timeout
		d.mu.Unlock()
		return nil, refusedError(ttl, g.timeout)
	}
	return s, nil
}

func refusedError(asked, granted time.Duration) error {
	return fmt.Errorf("%w: zookeeper: asked for a %v session timeout (the TTL), the server granted %v (bounded by its minSessionTimeout and maxSessionTimeout); use a TTL of %v or change the server's bounds",
		backend.ErrInvalidOption, asked, granted, granted)
}

// session returns the session that serves ttl, dialing it if needed.
func (d *zkDriver) session(ctx context.Context, ttl time.Duration) (*session, error) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, fmt.Errorf("zookeeper: %w", backend.ErrClosed)
		}
		if s, ok := d.sessions[ttl]; ok {
			d.mu.Unlock()
			return s, nil
		}
		if granted, ok := d.refused[ttl]; ok {
			d.mu.Unlock()
			return nil, refusedError(ttl, granted)
		}
		if d.given != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("%w: zookeeper: the connection's session timeout is %v, so is every TTL over it (got %v)", backend.ErrInvalidOption, d.defaultTTL, ttl)
		}
		if wait, ok := d.dialing[ttl]; ok {
			d.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		d.dialing[ttl] = done
		d.mu.Unlock()

		s, err := d.dial(ctx, ttl, false)
		d.mu.Lock()
		delete(d.dialing, ttl)
		close(done)
		if err == nil {
			if d.closed {
				d.mu.Unlock()
				s.close()
				return nil, fmt.Errorf("zookeeper: %w", backend.ErrClosed)
			}
			d.sessions[ttl] = s
		}
		d.mu.Unlock()
		return s, err
	}
}

// Capabilities implements driver.Driver: the default TTL is the session
// timeout the server granted for the first session (Config.SessionTimeout,
// or the URL's session_timeout or ttl), or that of the caller's Conn; a
// server with default settings grants no session timeout under 4s (its
// minSessionTimeout, 2*tickTime with the tickTime of 2s).
func (d *zkDriver) Capabilities() driver.Capabilities {
	d.mu.Lock()
	defer d.mu.Unlock()
	return ttlLimits.Capabilities(driver.Capabilities{Name: "zookeeper", DefaultTTL: d.defaultTTL, LockDelay: true})
}

// CheckTTL implements driver.Driver: the TTL is a session timeout, so
// ttlLimits' check (whole milliseconds); over a caller's Conn (New) it must
// be that Conn's negotiated timeout; a TTL the server already refused is
// refused again.
func (d *zkDriver) CheckTTL(ttl time.Duration) error {
	if err := ttlLimits.Check(ttl); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.given != nil && ttl != d.defaultTTL {
		return fmt.Errorf("the connection's negotiated session timeout is %v: a lease over it cannot have TTL %v", d.defaultTTL, ttl)
	}
	if granted, ok := d.refused[ttl]; ok {
		return fmt.Errorf("the ZooKeeper server grants %v for a %v session timeout", granted, ttl)
	}
	return nil
}

// NewLease implements driver.Driver: it picks the session of req.TTL and
// its current generation. started is the send time of the last request
// answered in that session, if it is recent (within TTL/3); otherwise it
// sends one (an Exists of the prefix) to have one.
func (d *zkDriver) NewLease(ctx context.Context, req driver.Request) (driver.Lease, time.Time, error) {
	data, err := nodeData(req)
	if err != nil {
		return nil, time.Time{}, err
	}
	s, err := d.session(ctx, req.TTL)
	if err != nil {
		return nil, time.Time{}, d.closedErr(err)
	}
	g, err := s.current(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	if g.timeout != req.TTL {
		return nil, time.Time{}, refusedError(req.TTL, g.timeout)
	}
	started := g.lastProof()
	if time.Since(started) > req.TTL/3 {
		sent := time.Now()
		if err := call(ctx, func() error { _, _, err := s.conn.Exists(d.prefix); return err }); err != nil {
			return nil, time.Time{}, s.closedErr(fmt.Errorf("zookeeper: %w", mapErr(err)))
		}
		if s.conn.SessionID() != g.id {
			return nil, time.Time{}, fmt.Errorf("zookeeper: the session changed (expired) while starting")
		}
		g.noteAlive(sent)
		started = sent
	}
	return newLease(d, s, g, lockDir(d.prefix, req.Name), data, req.LockDelay, req.Lost), started, nil
}

// close closes the sessions the driver dialed (closing a session deletes its
// ephemeral nodes) and stops following a caller's Conn. go-zookeeper waits
// up to 1s for the server to confirm each close, so close takes that long
// at most on an unreachable ensemble (the sessions are closed
// concurrently).
func (d *zkDriver) close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.closing)
	var all []*session
	for _, s := range d.sessions {
		all = append(all, s)
	}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.close()
		}()
	}
	wg.Wait()
	return nil
}

// Shutdown implements driver.Driver: close, returning when ctx ends if
// go-zookeeper still waits for the server to confirm a close then (it gives
// up after 1s; the connections are closed either way).
func (d *zkDriver) Shutdown(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- d.close() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: zookeeper: close unconfirmed: %w", backend.ErrUnavailable, ctx.Err())
	}
}

// nodeValue is the data of a lock acquisition's node, for status tools.
type nodeValue struct {
	Holder   string            `json:"holder,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// nodeData returns the data of req's lock node: a candidate's value as it
// is (a Curator LeaderSelector reads it as the participant id), or a lock's
// holder and metadata as JSON (nodeValue).
func nodeData(req driver.Request) ([]byte, error) {
	if req.Value != nil {
		return valueData(*req.Value), nil
	}
	data, err := json.Marshal(nodeValue{Holder: req.Holder, Metadata: req.Metadata})
	if err != nil {
		return nil, fmt.Errorf("%w: zookeeper: metadata: %v", backend.ErrInvalidOption, err)
	}
	return data, nil
}

// valueData is v as node data: never nil, since go-zookeeper sends nil as
// null data, which a Java client reads as null (Curator's LeaderSelector
// then fails to make a participant id of it), while "" must read as "".
func valueData(v string) []byte { return append([]byte{}, v...) }

// call runs f, which blocks on a go-zookeeper request (go-zookeeper takes no
// context), and returns its error or, if ctx ends first, ctx's error; f then
// finishes in the background and its results must not be read.
func call(ctx context.Context, f func() error) error {
	if ctx.Done() == nil {
		return f()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// zkLogger hands go-zookeeper's log lines to an slog.Logger at debug
// level, or drops them, unformatted, if it is nil or not enabled there.
type zkLogger struct{ l *slog.Logger }

// Printf implements zk.Logger.
func (z zkLogger) Printf(format string, args ...any) {
	if z.l == nil || !z.l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	z.l.Debug(fmt.Sprintf(format, args...), slog.String("client", "go-zookeeper"))
}

// closedErr is the caller's session's closedErr (New), or err as it is
// (Dial: the driver closes its sessions only once the Locker is closed).
func (d *zkDriver) closedErr(err error) error {
	if d.given == nil {
		return err
	}
	return d.given.closedErr(err)
}

// connDown reports errors after which the request may or may not have
// been applied and the session may still be alive.
func connDown(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer)
}

// mapErr wraps a go-zookeeper error in backend.ErrUnavailable when the
// connection is down (no server reachable, the connection closed with the
// request in flight), or in backend.ErrPermission when the server refused
// it for lack of permission. The client's error stays in the chain.
func mapErr(err error) error {
	switch {
	case err == nil || errors.Is(err, backend.ErrUnavailable) || errors.Is(err, backend.ErrPermission):
		return err
	case connDown(err), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed):
		return fmt.Errorf("%w: %w", backend.ErrPermission, err)
	}
	return err
}

// sessionGone reports errors that mean the session (and its nodes) is gone
// or the Conn closed.
func sessionGone(err error) bool {
	return errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}
