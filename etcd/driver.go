package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
)

// DefaultPrefix is the key prefix when none is given.
const DefaultPrefix = "fencelock"

// MinTTL is the shortest TTL the adapter accepts before asking the server
// (ttlLimits.Min), in whole seconds, as etcd counts lease TTLs. A server
// raises a TTL under its own minimum (1.5 times its election timeout, in
// whole seconds: 2s with the default 1s), and the acquisition is then
// refused with an error matching backend.ErrInvalidOption that names that
// minimum: on a server with default settings 2s is the shortest TTL that
// works.
const MinTTL = time.Second

// ttlLimits are the adapter's TTL limits, from which its Capabilities, its
// URLs' Limits, its suite profile and its CheckTTL derive: at least MinTTL,
// in whole seconds, 2s on a server with default settings.
var ttlLimits = driver.TTLLimits{Min: MinTTL, Granularity: time.Second, ServerDefaultMin: 2 * time.Second,
	Counted: "etcd lease TTLs"}

const (
	// poolSize is how many idle leases a Locker keeps per TTL.
	poolSize = 4
	// revokeTimeout bounds background revokes and those of Close.
	revokeTimeout = 5 * time.Second
)

// Config holds the adapter's own settings; the zero Config is the default.
type Config struct {
	// Prefix is the key prefix under which locks live (default
	// DefaultPrefix; a trailing slash is dropped). Lockers that share a
	// prefix (and a cluster) share their locks.
	Prefix string
}

// New returns a Locker that keeps its locks in etcd through client, with
// the adapter's settings cfg (the zero Config is the default of every
// field). opts are the Locker's defaults (see backend.Option). Closing the
// Locker revokes its idle leases but does not close client.
func New(client *clientv3.Client, cfg Config, opts ...backend.Option) (*backend.Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: etcd: nil client", backend.ErrInvalidOption)
	}
	if err := checkWatchable(client); err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrInvalidOption, err)
	}
	return backend.New(newDriver(client, cfg.Prefix, false), opts...)
}

// etcdDriver implements driver.Driver over one etcd client.
type etcdDriver struct {
	client *clientv3.Client
	owned  bool // close client on Shutdown
	prefix string

	mu     sync.Mutex
	closed bool
	pool   map[int64][]idleLease // by TTL in seconds; most recently used last
	bg     sync.WaitGroup        // background revokes and checks of own keys

	hub *watchHub // the watches of own keys
	// wakeups counts the predecessor deletions delivered to this driver's
	// waiters: one per handoff, as the tests check.
	wakeups atomic.Int64
	// reads counts the reads of older keys this driver's waiters made and
	// had answered: two for a waiter queued right behind the holder (when
	// it queues, and at its watch's creation), one more on its turn for a
	// waiter further back.
	reads  atomic.Int64
	bgCtx  context.Context // parent of background revokes; cancelled when Shutdown's ctx ends
	stopBg context.CancelFunc
}

// idleLease is a lease no acquisition uses, kept for the next one.
type idleLease struct {
	id   clientv3.LeaseID
	sent time.Time // send time of its last grant or keepalive
}

// disconnected reports whether the client has no connection to the
// cluster now: gRPC is connecting, or failed to (TRANSIENT_FAILURE).
func (d *etcdDriver) disconnected() bool {
	switch d.client.ActiveConnection().GetState() {
	case connectivity.Connecting, connectivity.TransientFailure:
		return true
	}
	return false
}

func newDriver(client *clientv3.Client, prefix string, owned bool) *etcdDriver {
	prefix = strings.TrimRight(prefix, "/")
	if prefix == "" {
		prefix = DefaultPrefix
	}
	d := &etcdDriver{client: client, owned: owned, prefix: prefix, pool: make(map[int64][]idleLease), hub: newWatchHub(client)}
	d.bgCtx, d.stopBg = context.WithCancel(context.Background())
	return d
}

// errClientClosed is returned at once for calls on a closed client, which
// clientv3's retry interceptor would otherwise retry for seconds (or until
// the context ends). A client the driver owns is closed only once the
// Locker is.
var errClientClosed = fmt.Errorf("etcd: %w", backend.ErrClientClosed)

// clientClosed returns errClientClosed if the client was closed.
func (d *etcdDriver) clientClosed() error {
	if d.client.Ctx().Err() != nil {
		return errClientClosed
	}
	return nil
}

// Capabilities implements driver.Driver.
func (d *etcdDriver) Capabilities() driver.Capabilities {
	return ttlLimits.Capabilities(driver.Capabilities{Name: "etcd", LockDelay: true})
}

// CheckTTL implements driver.Driver: ttlLimits' check (whole seconds).
func (d *etcdDriver) CheckTTL(ttl time.Duration) error { return ttlLimits.Check(ttl) }

// NewLease implements driver.Driver: it takes an idle lease of the same TTL
// whose expiry is comfortably far (renewed or granted less than TTL/3 ago),
// or grants a new one.
func (d *etcdDriver) NewLease(ctx context.Context, req driver.Request) (driver.Lease, time.Time, error) {
	if err := d.clientClosed(); err != nil {
		return nil, time.Time{}, err
	}
	ttl := int64(req.TTL / time.Second)
	value, err := keyValueOf(req)
	if err != nil {
		return nil, time.Time{}, err
	}
	l := &lease{
		d:     d,
		ttl:   ttl,
		dir:   nameDir(d.prefix, req.Name),
		value: value,
		lost:  req.Lost,
	}
	if idle, ok := d.take(ttl, time.Now()); ok {
		l.id, l.sent, l.fromPool = idle.id, idle.sent, true
	} else {
		id, sent, err := d.grant(ctx, ttl)
		if err != nil {
			return nil, time.Time{}, err
		}
		l.id, l.sent = id, sent
	}
	if req.LockDelay > 0 {
		if err := l.grantKeyLease(ctx, req.LockDelay); err != nil {
			if !l.fromPool {
				d.revokeAsync(l.id)
			}
			return nil, time.Time{}, err
		}
	}
	return l, l.sent, nil
}

// grant grants a lease of ttl seconds; sent is when the request was sent.
func (d *etcdDriver) grant(ctx context.Context, ttl int64) (id clientv3.LeaseID, sent time.Time, err error) {
	if d.isClosed() {
		return 0, time.Time{}, fmt.Errorf("etcd: grant lease: %w", backend.ErrClosed)
	}
	sent = time.Now()
	resp, err := d.client.Grant(ctx, ttl)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("etcd: grant lease: %w", d.mapErr(err))
	}
	if resp.TTL != ttl {
		d.revokeAsync(resp.ID)
		if resp.TTL > ttl {
			return 0, time.Time{}, fmt.Errorf("%w: the etcd server raised a %ds lease TTL to its minimum of %ds (set by its election timeout); use a TTL of at least %ds",
				backend.ErrInvalidOption, ttl, resp.TTL, resp.TTL)
		}
		return 0, time.Time{}, fmt.Errorf("etcd: asked for a %ds lease, the server granted %ds", ttl, resp.TTL)
	}
	return resp.ID, sent, nil
}

// take pops the most recently used idle lease of ttl seconds that was renewed
// less than TTL/3 before now, revoking older ones.
func (d *etcdDriver) take(ttl int64, now time.Time) (idleLease, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return idleLease{}, false
	}
	fresh := time.Duration(ttl) * time.Second / 3
	idle := d.pool[ttl]
	for len(idle) > 0 {
		last := idle[len(idle)-1]
		idle = idle[:len(idle)-1]
		if now.Sub(last.sent) < fresh {
			d.pool[ttl] = idle
			return last, true
		}
		d.revokeAsyncLocked(last.id)
	}
	delete(d.pool, ttl)
	return idleLease{}, false
}

// put returns a lease known to be alive and to own no key to the pool. If
// the pool is full or closed the lease is left to expire with its TTL: it
// holds nothing, and revoking it would be a second write beside every such
// release, which the next holder's grant would queue behind (a 200-waiter
// queue drained in twice the time with those revokes).
func (d *etcdDriver) put(ttl int64, idle idleLease) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || len(d.pool[ttl]) >= poolSize {
		return
	}
	d.pool[ttl] = append(d.pool[ttl], idle)
}

// revokeAsync revokes id in the background, best-effort: if it fails the
// lease expires with its TTL.
func (d *etcdDriver) revokeAsync(id clientv3.LeaseID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.revokeAsyncLocked(id)
}

func (d *etcdDriver) revokeAsyncLocked(id clientv3.LeaseID) {
	parent := d.bgCtx
	if d.closed {
		parent = context.Background() // after Close: the caller's client outlives the driver
	}
	revoke := func() {
		ctx, cancel := context.WithTimeout(parent, revokeTimeout)
		defer cancel()
		_, _ = d.client.Revoke(ctx, id)
	}
	switch {
	case !d.closed:
		d.bg.Add(1)
		go func() {
			defer d.bg.Done()
			revoke()
		}()
	case !d.owned:
		go revoke() // after Close: the caller's client outlives the driver
	default:
		// After Close the owned client is closed: the TTL removes the lease.
	}
}

// track registers a background goroutine that Close waits for; false if the
// driver is closed.
func (d *etcdDriver) track() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.bg.Add(1)
	return true
}

func (d *etcdDriver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// Shutdown implements driver.Driver: it revokes the idle leases, waits
// for background revokes and watches (Locker released every lease before,
// which stopped them) and closes the client if the driver owns it. Revokes
// are bounded by ctx (and revokeTimeout); once ctx ends, those left are
// abandoned (the leases expire with their TTL) and Shutdown returns soon
// after, closing an owned client.
func (d *etcdDriver) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	var ids []clientv3.LeaseID
	for _, idle := range d.pool {
		for _, l := range idle {
			ids = append(ids, l.id)
		}
	}
	d.pool = nil
	d.closed = true
	d.mu.Unlock()
	d.hub.close() // Release removed every watch unless a Release was skipped
	stop := context.AfterFunc(ctx, d.stopBg)
	defer stop()
	defer d.stopBg()

	rctx, cancel := context.WithTimeout(ctx, revokeTimeout)
	defer cancel()
	for _, id := range ids {
		d.bg.Add(1)
		go func() {
			defer d.bg.Done()
			_, _ = d.client.Revoke(rctx, id) // best-effort: the TTL removes it otherwise
		}()
	}
	done := make(chan struct{})
	go func() {
		d.bg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		// Background calls end with their (cancelled) contexts, or when
		// the client closes.
		err = fmt.Errorf("%w: etcd: close: revokes abandoned: %w", backend.ErrUnavailable, ctx.Err())
	}
	if d.owned {
		if cerr := d.client.Close(); cerr != nil && !errors.Is(cerr, context.Canceled) {
			err = errors.Join(err, fmt.Errorf("etcd: close client: %w", cerr))
		}
	}
	return err
}

// keyValue is the value of a lock acquisition's key (not a candidate's).
type keyValue struct {
	Holder   string            `json:"holder,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// keyValueOf returns the value of req's lock key: an election candidate's
// value as it is (so that a concurrency.Election on the same prefix reads
// it as the leader's value), else the JSON record of holder and metadata.
func keyValueOf(req driver.Request) (string, error) {
	if req.Value != nil {
		return *req.Value, nil
	}
	value, err := json.Marshal(keyValue{Holder: req.Holder, Metadata: req.Metadata})
	if err != nil {
		return "", fmt.Errorf("%w: etcd: metadata: %v", backend.ErrInvalidOption, err)
	}
	return string(value), nil
}

// holderOf returns the holder stored in a lock key's value, or "" if the key
// was written by someone else (a concurrency.Mutex stores "").
func holderOf(value []byte) string {
	var v keyValue
	if json.Unmarshal(value, &v) != nil {
		return ""
	}
	return v.Holder
}

// nameDir returns the directory of a lock name's keys, with its trailing
// slash: <prefix>/<escaped name>/. The escaped name holds no "/", so the
// directories of two names are disjoint and none is inside another.
func nameDir(prefix, name string) string {
	return prefix + "/" + url.PathEscape(name) + "/"
}

// leaseKey returns the key an acquisition holding lease id writes under dir.
func leaseKey(dir string, id clientv3.LeaseID) string {
	return fmt.Sprintf("%s%x", dir, int64(id))
}

// isLeaseNotFound reports whether err says the lease does not exist (expired
// or revoked).
func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound)
}
