package mem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

// errConnCut is what every call on a cut connection returns: not a lost
// lease, since the client cannot know, just an unreachable server.
var errConnCut = fmt.Errorf("%w: mem: connection cut", backend.ErrUnavailable)

// Conn is one client's connection to a Server.
type Conn struct {
	srv     *Server
	cutOnce sync.Once
	cut     chan struct{}
}

// Cut breaks the connection as a crash or a partition would: every call
// through it fails from now on, nothing is released, and the leases it holds
// expire on the server by their TTL.
func (c *Conn) Cut() { c.cutOnce.Do(func() { close(c.cut) }) }

func (c *Conn) check() error {
	select {
	case <-c.cut:
		return errConnCut
	default:
		return nil
	}
}

// New returns a Locker over conn. opts are defaults for every acquisition.
func New(conn *Conn, opts ...backend.Option) (*backend.Locker, error) {
	return backend.New(&driver{conn: conn}, opts...)
}

type driver struct {
	conn   *Conn
	mu     sync.Mutex
	closed bool
}

func (d *driver) MinTTL() time.Duration { return MinTTL }

func (d *driver) NewLease(ctx context.Context, req backend.Request) (backend.DriverLease, time.Time, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, time.Time{}, backend.ErrClosed
	}
	if err := d.conn.check(); err != nil {
		return nil, time.Time{}, err
	}
	sent := time.Now()
	dl := &driverLease{conn: d.conn, l: d.conn.srv.grant(req), lost: make(chan struct{})}
	go dl.watch()
	return dl, sent, nil
}

// Inspect implements backend.Inspector.
func (d *driver) Inspect(ctx context.Context, name string) (backend.Status, error) {
	if err := d.conn.check(); err != nil {
		return backend.Status{}, err
	}
	return d.conn.srv.status(name), nil
}

// Revoke implements backend.Revoker.
func (d *driver) Revoke(ctx context.Context, name string, token fencing.Token) (bool, error) {
	if err := d.conn.check(); err != nil {
		return false, err
	}
	return d.conn.srv.Revoke(name, token), nil
}

// RevokeID implements backend.IDRevoker.
func (d *driver) RevokeID(ctx context.Context, name, id string) (bool, error) {
	if err := d.conn.check(); err != nil {
		return false, err
	}
	return d.conn.srv.RevokeID(name, id), nil
}

func (d *driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}

type driverLease struct {
	conn    *Conn
	l       *lease
	granted bool
	lost    chan struct{} // closed when the server ends the lease, unless the conn was cut first
}

// watch relays the server's end of the lease to Lost, as a watch over a
// connection would: a cut connection hears nothing. It returns when the
// lease ends (by TTL at the latest) or the connection is cut.
func (dl *driverLease) watch() {
	select {
	case <-dl.l.gone:
		if dl.conn.check() == nil {
			close(dl.lost)
		}
	case <-dl.conn.cut:
	}
}

func (dl *driverLease) Lock(ctx context.Context, wait bool) (fencing.Token, time.Time, error) {
	if err := dl.conn.check(); err != nil {
		return 0, time.Time{}, err
	}
	srv := dl.conn.srv
	if err := srv.enqueue(dl.l, wait); err != nil {
		return 0, time.Time{}, err
	}
	if err := srv.wait(ctx, dl.l, dl.conn.cut); err != nil {
		if ctx.Err() != nil && !errors.Is(err, backend.ErrLeaseLost) {
			// Queued behind a holder until ctx ended.
			return 0, time.Time{}, fmt.Errorf("%w: mem: %w", backend.ErrNotAcquired, err)
		}
		return 0, time.Time{}, err
	}
	dl.granted = true
	return dl.l.token, time.Time{}, nil
}

func (dl *driverLease) KeepAlive(ctx context.Context) error {
	if err := dl.conn.check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return dl.conn.srv.keepAlive(dl.l)
}

func (dl *driverLease) Release(ctx context.Context) error {
	if err := dl.conn.check(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return dl.conn.srv.release(dl.l, dl.granted)
}

func (dl *driverLease) Lost() <-chan struct{} { return dl.lost }
