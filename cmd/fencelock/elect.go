package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
)

const electUsage = `usage: fencelock elect --url URL --name NAME [flags] -- COMMAND [ARGS...]

Campaigns in the election NAME and, once this process leads, runs COMMAND
with FENCELOCK_TOKEN (the term number: the term's fencing token),
FENCELOCK_NAME (the election's name) and FENCELOCK_VALUE (this leader's
value) in its environment. Candidates lead in the order they campaigned.
The term is renewed while COMMAND runs, and resigned when it exits: the
next candidate leads at once, without waiting for the TTL. If the term is
lost, or --max-hold is reached, COMMAND is stopped as fencelock run stops
it: SIGTERM, then SIGKILL after --grace, timed so that it is gone before
another candidate could lead. Signals sent to fencelock are passed to
COMMAND while it runs; one that comes while fencelock campaigns gives the
campaign up. COMMAND gets the term's local deadline in FENCELOCK_DEADLINE
and FENCELOCK_DEADLINE_FILE, and on Linux a watchdog kills its process
group at that deadline if fencelock is stopped, or at once if it dies, as
for fencelock run (see fencelock run -h).

With --forever, fencelock campaigns again each time COMMAND exits or the
term is lost (at once after a term of 10s or more; after a shorter one
with a pause from 0.5s that doubles, up to 10s, while terms stay short),
and while the backend cannot be reached (with the same growing pause), until a signal comes while it
campaigns, or SIGINT, SIGTERM, SIGHUP or SIGQUIT while COMMAND runs (passed
on to COMMAND: fencelock exits once COMMAND has).

'fencelock leader NAME' shows who leads, with its value and term.

Exit status: COMMAND's own (128+N if killed by signal N) when it ran to its
end (with --forever: the last COMMAND's, when a signal stopped fencelock
while it ran; 0 if one stopped it while campaigning), else:
  64 usage error           65 invalid URL, name, value or option
  69 backend unavailable   75 not elected (the campaign was given up: a
                              signal, or --wait-timeout)
  76 term lost, or max hold reached, while COMMAND ran (COMMAND was stopped)
  77 permission denied by the backend
  127 COMMAND could not be started         0 for -h

--metrics-addr HOST:PORT serves the term's metrics (fencelock_acquire_duration_seconds,
fencelock_leases_held, ...: see the backend package's documentation) in the
Prometheus text format at http://HOST:PORT/metrics while fencelock runs; an
address that is not HOST:PORT, or cannot be listened on, is a usage error.

flags:
`

// Campaigns that --forever makes while the backend cannot be reached wait
// between them from retryMin, doubling, up to retryMax.
const (
	retryMin = 500 * time.Millisecond
	retryMax = 10 * time.Second
	// steadyTerm is how long a term must last for --forever to campaign
	// again at once when it ends; after a shorter one it waits the pause,
	// which doubles while terms stay short.
	steadyTerm = 10 * time.Second
)

// electFlags are fencelock elect's settings.
type electFlags struct {
	url, name, value   string
	ttl, maxHold       time.Duration
	lockDelay          time.Duration
	waitTimeout, grace time.Duration
	connect            time.Duration
	forever            bool
	metricsAddr        string
	args               []string // the command
}

func electCmd(args []string, stdout, stderr io.Writer) int {
	f, code, ok := parseElect(args, stdout, stderr)
	if !ok {
		return code
	}

	metrics, observe, err := serveMetrics(f.metricsAddr)
	if err != nil {
		return usageErr(stderr, "elect", err.Error())
	}
	defer metrics.close()

	// Signals that arrive while campaigning give the campaign up.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	ctx, stopWatching := untilSignal(sigs)
	locker, err := openWithin(ctx, f.url, f.connect, observe...)
	if stopWatching() {
		// A signal while connecting gives the campaign up, as one while
		// campaigning does.
		if err == nil {
			_ = locker.Close()
		}
		if f.forever {
			return exitOK
		}
		return report(stderr, "elect", fmt.Errorf("fencelock: campaign %q: %w: a signal came while connecting", f.name, backend.ErrNotAcquired))
	}
	if err != nil {
		return report(stderr, "elect", err)
	}
	defer locker.Close()
	elector, err := election.New(locker)
	if err != nil {
		return report(stderr, "elect", err)
	}
	var opts []backend.Option
	if f.ttl != 0 {
		opts = append(opts, backend.WithTTL(f.ttl))
	}
	if f.maxHold != 0 {
		opts = append(opts, backend.WithMaxHold(f.maxHold))
	}
	if f.lockDelay != 0 {
		opts = append(opts, backend.WithLockDelay(f.lockDelay))
	}

	pause := retryMin
	for {
		// Up while the campaign goes on, so that the command's start does
		// not wait for it (see watchdog_linux.go).
		wd, err := startWatchdog()
		if err != nil {
			printErr(stderr, "elect", err.Error())
			return 127
		}
		term, signalled, err := campaign(elector, f, opts, sigs)
		if term == nil {
			wd.finish()
		}
		switch {
		case signalled && f.forever:
			return exitOK
		case err != nil && f.forever && !signalled && retryable(err):
			printErr(stderr, "elect", fmt.Sprintf("%v: campaigning again in %v", err, pause))
			if sleepOrSignal(pause, sigs) {
				return exitOK
			}
			pause = min(2*pause, retryMax)
			continue
		case err != nil:
			return report(stderr, "elect", err)
		}
		began := time.Now()
		out := lead(term, wd, f, sigs, stdout, stderr)
		if !f.forever || out.stopped || !out.started {
			return out.code
		}
		why := fmt.Sprintf("the command exited with status %d", out.code)
		if out.lost {
			why = "the term was lost"
		}
		held := time.Since(began)
		if held >= steadyTerm {
			pause = retryMin
			printErr(stderr, "elect", fmt.Sprintf("term %s ended (%s): campaigning again", term.Token(), why))
			continue
		}
		// A command that fails at once, or a term lost as soon as it is
		// granted, must not spin: wait, longer each time.
		printErr(stderr, "elect", fmt.Sprintf("term %s ended after %v (%s): campaigning again in %v",
			term.Token(), held.Round(time.Millisecond), why, pause))
		if sleepOrSignal(pause, sigs) {
			return exitOK
		}
		pause = min(2*pause, retryMax)
	}
}

// parseElect parses and checks elect's command line, all of it before any
// connection is made: a bad URL, name or value is reported at once. ok is
// false if the command is not to go on; code is its exit status then.
func parseElect(args []string, stdout, stderr io.Writer) (f electFlags, code int, ok bool) {
	fs := newFlagSet("elect", electUsage)
	fs.StringVar(&f.url, "url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	fs.StringVar(&f.name, "name", "", "election name (required)")
	fs.StringVar(&f.value, "value", "", "this candidate's value, shown by 'fencelock leader' (default hostname:pid)")
	fs.DurationVar(&f.ttl, "ttl", 0, "term TTL (default: the URL's ttl, else 15s)")
	fs.DurationVar(&f.maxHold, "max-hold", 0, "stop renewing the term after this long, so that it ends within one TTL more; 0: no limit")
	fs.DurationVar(&f.lockDelay, "lock-delay", 0, lockDelayUsage)
	fs.DurationVar(&f.waitTimeout, "wait-timeout", 0, "give up campaigning after this long (status 75); 0 waits forever")
	fs.DurationVar(&f.grace, "grace", 2*time.Second, "time between SIGTERM and SIGKILL when the term is lost (at most TTL/3)")
	fs.BoolVar(&f.forever, "forever", false, "campaign again when COMMAND exits or the term is lost, until a signal stops fencelock")
	connect := connectTimeoutFlag(fs)
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve the term's metrics in the Prometheus text format at http://HOST:PORT/metrics; none if empty")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return f, code, false
	}
	f.connect, f.args = *connect, fs.Args()
	if !isSet(fs, "value") {
		f.value = defaultValue()
	}
	switch {
	case len(f.args) == 0:
		return f, usageErr(stderr, "elect", "no command given (put it after --)"), false
	case f.url == "":
		return f, usageErr(stderr, "elect", "no backend URL: give --url or set FENCELOCK_URL"), false
	case f.name == "":
		return f, usageErr(stderr, "elect", "no election name: give --name"), false
	case f.forever && f.waitTimeout > 0:
		return f, usageErr(stderr, "elect", "--forever and --wait-timeout exclude each other"), false
	case f.waitTimeout < 0:
		return f, usageErr(stderr, "elect", "--wait-timeout must not be negative"), false
	case f.grace <= 0:
		return f, usageErr(stderr, "elect", "--grace must be positive"), false
	case f.connect <= 0:
		return f, usageErr(stderr, "elect", "--connect-timeout must be positive"), false
	case f.metricsAddr != "" && checkMetricsAddr(f.metricsAddr) != nil:
		return f, usageErr(stderr, "elect", checkMetricsAddr(f.metricsAddr).Error()), false
	}
	for _, err := range []error{
		backend.CheckURL(f.url),
		backend.ValidateName(f.name),
		checkValueFlag(f.value),
	} {
		if err != nil {
			return f, report(stderr, "elect", err), false
		}
	}
	if err := checkTTLFlags(f.url, f.ttl, f.maxHold); err != nil { // once the URL is known good
		return f, report(stderr, "elect", err), false
	}
	if err := checkLockDelayFlag(f.url, f.lockDelay); err != nil {
		return f, report(stderr, "elect", err), false
	}
	return f, exitOK, true
}

// defaultValue is a candidate's value when --value is not given: the
// holder identity a lock gets by default, hostname:pid.
func defaultValue() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// isSet reports whether the flag called name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// checkValueFlag reports why backend.WithValue would refuse --value, so
// that elect refuses it before it connects.
func checkValueFlag(v string) error {
	if err := backend.CheckValue(v); err != nil {
		return fmt.Errorf("--value: %w", err)
	}
	return nil
}

// campaign campaigns until this process leads, a signal arrives on sigs
// (signalled: the campaign was given up, and no term is returned), or
// --wait-timeout passes.
func campaign(e *election.Elector, f electFlags, opts []backend.Option, sigs <-chan os.Signal) (term *election.Term, signalled bool, err error) {
	ctx, stopWatching := untilSignal(sigs)
	defer stopWatching()
	if f.waitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.waitTimeout)
		defer cancel()
	}
	term, err = e.Campaign(ctx, f.name, f.value, opts...)
	if stopWatching() {
		if term != nil {
			// Elected as the signal came: hand the term over.
			resign(term, f.connect)
			term = nil
		}
		if err == nil {
			err = fmt.Errorf("fencelock: campaign %q: %w: a signal came as it was elected", f.name, backend.ErrNotAcquired)
		}
		return nil, true, err
	}
	return term, false, err
}

// lead runs the command under term, watched by wd, and resigns when it has
// exited.
func lead(term *election.Term, wd *watchdog, f electFlags, sigs <-chan os.Signal, stdout, stderr io.Writer) outcome {
	acquired := time.Now()
	defer resign(term, f.connect)
	return supervise(term.Lease(), wd, job{
		verb: "elect", held: "term", args: f.args, grace: f.grace,
		env: []string{
			"FENCELOCK_TOKEN=" + term.Token().String(),
			"FENCELOCK_NAME=" + term.Name(),
			"FENCELOCK_VALUE=" + term.Value(),
		},
		hold: holdLimit{max: effectiveMaxHold(f.url, f.maxHold), acquired: acquired},
	}, sigs, stdout, stderr)
}

// resign hands the term over, giving up after d (the term then ends by its
// TTL). A term already lost has nothing to hand over.
func resign(term *election.Term, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = term.Resign(ctx)
}

// retryable reports whether --forever campaigns again after err: the
// backend could not be reached, or the candidacy was lost while it waited.
func retryable(err error) bool {
	switch exitCode(err) {
	case exitUnavailable, exitLockLost:
		return !errors.Is(err, backend.ErrClosed)
	}
	return false
}

// sleepOrSignal waits for d, or for a signal on sigs: it reports whether
// one came.
func sleepOrSignal(d time.Duration, sigs <-chan os.Signal) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return false
	case <-sigs:
		return true
	}
}
