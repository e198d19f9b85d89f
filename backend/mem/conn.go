package mem

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
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

// New returns a Locker over conn (an error matching backend.ErrInvalidOption
// if it is nil). opts are defaults for every acquisition.
func New(conn *Conn, opts ...backend.Option) (*backend.Locker, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: mem: nil connection", backend.ErrInvalidOption)
	}
	return backend.New(&memDriver{conn: conn}, opts...)
}

type memDriver struct {
	conn   *Conn
	mu     sync.Mutex
	closed bool
}

// Capabilities implements driver.Driver.
func (d *memDriver) Capabilities() driver.Capabilities {
	return ttlLimits.Capabilities(driver.Capabilities{Name: "mem", LockDelay: true})
}

// CheckTTL implements driver.Driver: ttlLimits' check (any TTL of MinTTL
// or more).
func (d *memDriver) CheckTTL(ttl time.Duration) error { return ttlLimits.Check(ttl) }

func (d *memDriver) NewLease(ctx context.Context, req driver.Request) (driver.Lease, time.Time, error) {
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
	dl := &driverLease{conn: d.conn, l: d.conn.srv.grant(req)}
	context.AfterFunc(dl.l.gone, func() { dl.reportEnd(req.Lost) })
	return dl, sent, nil
}

// Inspect implements driver.Driver.
func (d *memDriver) Inspect(ctx context.Context, name string) (driver.Status, error) {
	if err := d.conn.check(); err != nil {
		return driver.Status{}, err
	}
	return d.conn.srv.status(name), nil
}

// Revoke implements driver.Driver.
func (d *memDriver) Revoke(ctx context.Context, name string, token fencing.Token) (bool, error) {
	if err := d.conn.check(); err != nil {
		return false, err
	}
	return d.conn.srv.Revoke(name, token), nil
}

// RevokeID implements driver.Driver.
func (d *memDriver) RevokeID(ctx context.Context, name, id string) (bool, error) {
	if err := d.conn.check(); err != nil {
		return false, err
	}
	return d.conn.srv.RevokeID(name, id), nil
}

// Shutdown implements driver.Driver.
func (d *memDriver) Shutdown(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}

type driverLease struct {
	conn    *Conn
	l       *lease
	granted bool
}

// reportEnd reports the server's end of the lease to lost, as a watch over
// a connection would: a cut connection hears nothing. It runs once the
// lease ends (by TTL at the latest), so a lease costs no goroutine while
// it lives.
func (dl *driverLease) reportEnd(lost func(error)) {
	if dl.conn.check() == nil {
		// endedBy is set before gone is done; nil: released.
		lost(fmt.Errorf("mem: the server ended the lease: %w", cmp.Or(dl.l.endedBy, backend.ErrReleased)))
	}
}

func (dl *driverLease) Lock(ctx context.Context, wait bool) (driver.Grant, error) {
	if err := dl.conn.check(); err != nil {
		return driver.Grant{}, err
	}
	srv := dl.conn.srv
	if err := srv.enqueue(dl.l, wait); err != nil {
		return driver.Grant{}, err
	}
	if err := srv.wait(ctx, dl.l, dl.conn.cut); err != nil {
		// Queued behind a holder until ctx ended, or the connection cut.
		w := driver.Wait{Where: "mem", Queued: true}
		if dl.conn.check() != nil {
			w.Stopped = "the connection was cut"
		}
		return driver.Grant{}, driver.WaitError(ctx, err, w)
	}
	dl.granted = true
	return driver.Grant{Token: dl.l.token}, nil
}

func (dl *driverLease) KeepAlive(ctx context.Context) (time.Time, error) {
	if err := dl.conn.check(); err != nil {
		return time.Time{}, err
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	sent := time.Now()
	return sent, dl.conn.srv.keepAlive(dl.l)
}

func (dl *driverLease) Release(ctx context.Context, lost bool) error {
	if err := dl.conn.check(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return dl.conn.srv.release(dl.l, dl.granted, lost)
}

// Suspended implements driver.Lease: mem has no connection state to report.
func (dl *driverLease) Suspended() (bool, <-chan struct{}) { return false, nil }

// Proclaim implements driver.Lease.
func (dl *driverLease) Proclaim(ctx context.Context, value string) error {
	if err := dl.conn.check(); err != nil {
		return fmt.Errorf("proclaim: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return dl.conn.srv.proclaim(dl.l, value)
}
