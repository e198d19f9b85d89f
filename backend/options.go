package backend

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencelock/fencelock/backend/driver"
)

// DefaultTTL is the lease TTL when WithTTL is not given.
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
	drift     time.Duration
	driftSet  bool
	holder    string
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
// successful renewal. Default DefaultTTL (15s). It must be positive and at
// least the backend's minimum (etcd: 2s, whole seconds). It cannot be turned
// off: a lock without expiry blocks everyone forever when its holder crashes.
func WithTTL(ttl time.Duration) Option { return func(s *settings) { s.ttl = ttl } }

// WithAutoRenew turns background renewal of a held lease on or off. Default
// on: the lease is renewed every TTL/3, and retried until the loss deadline
// when a renewal fails. Off: once granted, the lease is lost at its deadline
// unless Refresh is called. A waiting acquisition is always renewed.
func WithAutoRenew(on bool) Option { return func(s *settings) { s.autoRenew = on } }

// WithMaxHold stops auto-renew once the lease has been held for d, so that a
// stuck holder loses the lock within d plus one TTL. Default 0: no limit.
// Refresh still works after it.
func WithMaxHold(d time.Duration) Option { return func(s *settings) { s.maxHold = d } }

// WithDriftMargin sets how much earlier than the server could expire the lease
// the holder gives it up: the local deadline is (send time of the last
// successful acquire or renewal) + TTL - margin, on the monotonic clock. It
// covers clock-rate differences between client and server. Default: 1% of
// TTL plus 5ms (at most TTL/10). Zero turns the margin off (the deadline is then exactly send
// time + TTL, which is still never later than the server's expiry if clocks
// run at the same rate). It must be smaller than TTL.
func WithDriftMargin(d time.Duration) Option {
	return func(s *settings) { s.drift, s.driftSet = d, true }
}

// WithHolder sets the holder identity stored with the lock where the backend
// can store it, for status tools. Default "hostname:pid".
func WithHolder(id string) Option { return func(s *settings) { s.holder = id } }

// WithMetadata adds key/value pairs stored with the lock beside the holder
// identity, for status tools. Default none.
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
	if s.ttl <= 0 {
		return s, fmt.Errorf("%w: TTL must be positive, got %v", ErrInvalidOption, s.ttl)
	}
	if s.ttl < caps.MinTTL {
		return s, fmt.Errorf("%w: TTL %v is under this backend's minimum of %v", ErrInvalidOption, s.ttl, caps.MinTTL)
	}
	if err := drv.CheckTTL(s.ttl); err != nil {
		return s, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if !s.driftSet {
		s.drift = driftOf(s.ttl)
	}
	if s.drift < 0 || s.drift >= s.ttl {
		return s, fmt.Errorf("%w: drift margin %v must be at least 0 and smaller than TTL %v", ErrInvalidOption, s.drift, s.ttl)
	}
	if s.maxHold < 0 {
		return s, fmt.Errorf("%w: max hold must not be negative, got %v", ErrInvalidOption, s.maxHold)
	}
	if s.value != nil {
		if err := CheckValue(*s.value); err != nil {
			return s, err
		}
	}
	return s, nil
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
