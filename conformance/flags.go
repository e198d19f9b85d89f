package conformance

import (
	"flag"
	"strconv"
	"time"
)

// CapabilityFlags defines on fs the flags that override Capabilities, each
// named with prefix: ttl, min-ttl, max-ttl (durations) and fifo (a
// boolean). A flag that is not given leaves the capability as it was, as
// the scheme declares it (URLCapabilities); the returned function applies
// those that were given to c. fencelock conformance defines them with no
// prefix, the conformance tests (TestURL with a URL of yours) with
// "fencelock.".
func CapabilityFlags(fs *flag.FlagSet, prefix string) (apply func(c *Capabilities)) {
	var ttl, minTTL, maxTTL durationFlag
	var fifo boolFlag
	fs.Var(&ttl, prefix+"ttl", "the short TTL the suite gives leases meant to expire (default: the scheme's; ZooKeeper's is read from the server)")
	fs.Var(&minTTL, prefix+"min-ttl", "the backend's minimum TTL: shorter ones must be refused, this one accepted (default: the scheme's)")
	fs.Var(&maxTTL, prefix+"max-ttl", "the backend's maximum TTL, which caps the suite's long leases (15*ttl, at least 30s); 0 for none (default: the scheme's)")
	fs.Var(&fifo, prefix+"fifo", "the backend grants waiters in FIFO order (default: the scheme's; -"+prefix+"fifo=false to skip the FIFO case)")
	return func(c *Capabilities) {
		if ttl.set {
			c.TTL = ttl.d
		}
		if minTTL.set {
			c.MinTTL = minTTL.d
		}
		if maxTTL.set {
			c.MaxTTL = maxTTL.d
		}
		if fifo.set {
			c.FIFO = fifo.on
		}
	}
}

// durationFlag is a time.Duration flag that knows whether it was given.
type durationFlag struct {
	d   time.Duration
	set bool
}

func (f *durationFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return f.d.String()
}

func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	f.d, f.set = d, true
	return nil
}

// boolFlag is a bool flag that knows whether it was given.
type boolFlag struct {
	on, set bool
}

func (f *boolFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.FormatBool(f.on)
}

func (f *boolFlag) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	f.on, f.set = on, true
	return nil
}

func (f *boolFlag) IsBoolFlag() bool { return true }
