package backend

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencelock/fencelock/backend/driver"
)

// DefaultTTL is the lease TTL when WithTTL is not given, on every backend
// but ZooKeeper, whose lease TTL is a session timeout: there the default is
// the session timeout the server granted for the first session (for the
// URL's ttl or session_timeout, DefaultTTL if it has neither;
// Config.SessionTimeout with Dial; the connection's with New), which a
// server may set between its tick time times 2 and times 20.
const DefaultTTL = 15 * time.Second

// Option configures a Locker (as defaults for all its acquisitions, given to
// New or Open) or one acquisition (given to Acquire or TryAcquire, overriding
// the Locker's defaults). The telemetry options (WithMeterProvider,
// WithTracerProvider, WithLogger, WithLockNameAttribute) configure the
// Locker only: given to Acquire or TryAcquire they are rejected with an
// error matching ErrInvalidOption.
type Option func(*settings)

// settings is the resolved configuration of one acquisition.
type settings struct {
	ttl       time.Duration
	autoRenew bool
	maxHold   time.Duration
	lockDelay time.Duration
	drift     time.Duration
	driftSet  bool
	holder    string
	holderErr error // why WithHolder's identity is refused, or nil
	metadata  map[string]string
	value     *string
	// obs holds the Locker-only options, set only while New reads them
	// (nil in every acquisition's settings).
	obs *observeOptions
}

func defaultSettings() settings {
	return settings{ttl: DefaultTTL, autoRenew: true, holder: defaultHolder()}
}

func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// WithTTL sets the lease TTL: how long the lock outlives its holder's last
// successful renewal. Default DefaultTTL (15s; on ZooKeeper the session
// timeout granted, see DefaultTTL). It must be positive, at least the
// backend's minimum and a whole number of the unit it counts (etcd:
// seconds): see MinTTL in each adapter's package (etcd, zookeeper, redis,
// postgres, backend/mem), which also says what a server with default
// settings takes. It cannot be turned off: a lock without expiry blocks
// everyone forever when its holder crashes.
func WithTTL(ttl time.Duration) Option { return func(s *settings) { s.ttl = ttl } }

// WithAutoRenew turns background renewal of a held lease on or off. Default
// on: the lease is renewed every TTL/3, and retried until the loss deadline
// when a renewal fails. WithAutoRenew(false) turns it off: once granted, the
// lease is lost at its deadline unless Refresh is called. A waiting
// acquisition is always renewed.
func WithAutoRenew(on bool) Option { return func(s *settings) { s.autoRenew = on } }

// WithMaxHold stops auto-renew once the lease has been held for d, so that a
// stuck holder loses the lock within d plus one TTL. Default 0: no limit;
// WithMaxHold(0) turns a limit given earlier off. It must not be negative.
// Refresh still works after it.
func WithMaxHold(d time.Duration) Option { return func(s *settings) { s.maxHold = d } }

// WithLockDelay sets the lock-delay of the acquisition, as Chubby's and
// Consul's: if its lease ends otherwise than by its holder's Release (it
// expires after a crash or a partition, or is released only after such a
// loss, or its session ends; on Redis, PostgreSQL, ZooKeeper and mem also
// when it is revoked: on etcd the lock key is the lock, and revoking or
// deleting it frees the lock at once), nobody is granted the lock, through any Locker of the
// backend, until at least d has passed after that end. A Release by the holder while it holds lifts it at once.
// Use it for a resource that cannot check fencing tokens: a holder that
// lost its lease without knowing it (paused, cut off) may still be
// writing there, and the delay gives such writes time to land or fail
// before the next holder starts. Its cost is availability: after a crash
// the lock is free again only a TTL plus d after the holder's last
// renewal, instead of a TTL. The backend enforces it: every acquisition of
// the lock waits it out (a TryAcquire finds the lock held), whatever its
// own options. Default 0: none (WithLockDelay(0) turns one given earlier
// off). It must not be negative; the backend rounds it up to its unit
// (etcd: whole seconds, the others whole milliseconds). A backend that
// cannot honour it refuses it with ErrInvalidOption.
func WithLockDelay(d time.Duration) Option { return func(s *settings) { s.lockDelay = d } }

// WithDriftMargin sets how much earlier than the server could expire the lease
// the holder gives it up: the local deadline is (send time of the last
// successful acquire or renewal) + TTL - margin, on the monotonic clock. It
// covers clock-rate differences between client and server. Default: 1% of
// TTL plus 5ms (at most TTL/10). WithDriftMargin(0) turns the margin off
// (the deadline is then exactly send time + TTL, which is still never later
// than the server's expiry if clocks run at the same rate). It must not be
// negative, and must be smaller than TTL.
func WithDriftMargin(d time.Duration) Option {
	return func(s *settings) { s.drift, s.driftSet = d, true }
}

// WithHolder sets the holder identity stored with the lock where the backend
// can store it, for status tools. Default "hostname:pid"; it cannot be
// turned off (a lock always says who holds it). It must be printable UTF-8
// (no control characters: status tools show it on one line) and not
// empty; an identity that is not is refused with an error matching
// ErrInvalidOption where the option is used (New, Open, Acquire), as the
// URL's holder parameter is.
func WithHolder(id string) Option {
	var err error
	if why := holderProblem(id); why != "" {
		err = fmt.Errorf("%w: WithHolder(%q): %s", ErrInvalidOption, id, why)
	}
	return func(s *settings) { s.holder, s.holderErr = id, err }
}

// holderProblem says why id cannot be a holder identity (WithHolder, the
// URL's holder parameter), or returns "".
func holderProblem(id string) string {
	switch {
	case id == "":
		return "the holder is empty (leave it out for the default, hostname:pid)"
	case !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0:
		return "the holder is not printable UTF-8"
	}
	return ""
}

// WithMetadata adds key/value pairs stored with the lock beside the holder
// identity, for status tools. Default none; pairs given earlier (to New or
// Open, for an Acquire) cannot be taken off, only replaced key by key.
func WithMetadata(kv map[string]string) Option {
	return func(s *settings) {
		m := make(map[string]string, len(s.metadata)+len(kv))
		for k, v := range s.metadata {
			m[k] = v
		}
		for k, v := range kv {
			m[k] = v
		}
		s.metadata = m
	}
}

// MaxValueLen is the longest value WithValue accepts, in bytes.
const MaxValueLen = 4096

// WithValue makes the acquisition an election candidate's (package
// election sets it): v is stored with the lock in place of the holder
// identity and metadata, as it is (on etcd and ZooKeeper the raw data of
// the lock key or node, which other libraries' candidates read, such as
// etcd's concurrency.Election), shown by Status as Entry.Value, and
// replaced while held with Lease.Proclaim. It must be valid UTF-8 without
// NUL bytes and at most MaxValueLen bytes. The holder identity and metadata
// (WithHolder, WithMetadata) of such an acquisition are not stored. Default
// none: a lock stores its holder identity and metadata.
func WithValue(v string) Option { return func(s *settings) { s.value = &v } }

// CheckValue reports why v cannot be stored as a value (WithValue,
// Lease.Proclaim), with an error matching ErrInvalidOption, or nil. It
// sends nothing: a command line checks its input with it before it
// connects.
func CheckValue(v string) error {
	switch {
	case len(v) > MaxValueLen:
		return fmt.Errorf("%w: value is %d bytes, more than %d", ErrInvalidOption, len(v), MaxValueLen)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: value is not valid UTF-8", ErrInvalidOption)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%w: value holds a NUL byte", ErrInvalidOption)
	}
	return nil
}

// resolve applies opts over base and checks the result against the driver's
// limits (caps: its Capabilities). WithMetadata copies, so base is never
// modified.
func resolve(base settings, drv driver.Driver, caps driver.Capabilities, opts []Option) (settings, error) {
	s := base
	if len(opts) > 0 {
		s = apply(base, opts) // s itself does not escape: no allocation without options
	}
	if s.obs != nil {
		return s, fmt.Errorf("%w: %s configures the Locker: give it to New or Open, not to an acquisition", ErrInvalidOption, s.obs.first)
	}
	if err := s.check(caps.MinTTL, drv, caps.LockDelay); err != nil {
		return s, err
	}
	return s, nil
}

// ttlChecker is a driver's check of a TTL (driver.Driver.CheckTTL).
type ttlChecker interface{ CheckTTL(time.Duration) error }

// limitsChecker is the CheckTTL of a scheme's Limits: nil checks nothing.
type limitsChecker func(time.Duration) error

func (f limitsChecker) CheckTTL(ttl time.Duration) error {
	if f == nil {
		return nil
	}
	return f(ttl)
}

// check checks s against a backend whose minimum TTL is minTTL, whose
// own check of a TTL is ttls and that honours a lock-delay if delays, and
// sets its drift margin to the default if none was given. Its errors match
// ErrInvalidOption.
func (s *settings) check(minTTL time.Duration, ttls ttlChecker, delays bool) error {
	if s.ttl <= 0 {
		return fmt.Errorf("%w: TTL must be positive, got %v", ErrInvalidOption, s.ttl)
	}
	if s.ttl < minTTL {
		return fmt.Errorf("%w: TTL %v is under this backend's minimum of %v", ErrInvalidOption, s.ttl, minTTL)
	}
	if err := ttls.CheckTTL(s.ttl); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if !s.driftSet {
		s.drift = driftOf(s.ttl)
	}
	if s.drift < 0 || s.drift >= s.ttl {
		return fmt.Errorf("%w: drift margin %v must be at least 0 and smaller than TTL %v", ErrInvalidOption, s.drift, s.ttl)
	}
	if s.maxHold < 0 {
		return fmt.Errorf("%w: max hold must not be negative, got %v", ErrInvalidOption, s.maxHold)
	}
	if s.lockDelay < 0 {
		return fmt.Errorf("%w: lock-delay must not be negative, got %v (0 turns it off)", ErrInvalidOption, s.lockDelay)
	}
	if s.lockDelay > 0 && !delays {
		return fmt.Errorf("%w: lock-delay %v: this backend cannot enforce a lock-delay", ErrInvalidOption, s.lockDelay)
	}
	if s.holderErr != nil {
		return s.holderErr
	}
	if s.value != nil {
		if err := CheckValue(*s.value); err != nil {
			return err
		}
	}
	return nil
}

// apply returns s with opts applied.
func apply(s settings, opts []Option) settings {
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	return s
}
