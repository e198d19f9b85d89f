package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	neturl "net/url"
	"strings"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// Exit statuses shared by every subcommand, after sysexits.h. fencelock run
// exits with its command's own status when the command ran to its end.
const (
	exitOK          = 0   // success, and explicit help (-h, --help, help)
	exitFailure     = 1   // demo: the stale write was accepted; conformance: a case failed; chaos: a violation; advise: too few holds
	exitUsage       = 64  // EX_USAGE: unknown command or flag, missing or extra arguments
	exitInvalid     = 65  // EX_DATAERR: bad URL, lock name or option
	exitUnavailable = 69  // EX_UNAVAILABLE: backend unreachable or failing (and any error not below)
	exitNotAcquired = 75  // EX_TEMPFAIL: the lock is held by someone else, or the wait timed out
	exitLockLost    = 76  // EX_PROTOCOL: the lease was lost, or --max-hold ended it
	exitPermission  = 77  // EX_NOPERM: the backend refused the request (ACL, role, credentials)
	exitInterrupted = 130 // 128+SIGINT, as shells report it: a signal (SIGINT, SIGTERM) ended the command's work
)

// exitTable is the exit-status part of the usage texts.
const exitTable = `Exit status:
  0  success (and -h)        64 usage error       65 invalid URL, name or option
  69 backend unavailable     75 not acquired      76 lease lost or max hold reached
  77 permission denied by the backend
  130 interrupted by a signal (SIGINT, SIGTERM) before its work was done
`

// exitCode maps an error of the backend package to the exit status of
// every subcommand. The more specific sentinel wins: an unreachable backend
// during a wait is 69, not 75, so a job that skips its work when the lock is
// held never skips it silently when the backend is down.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, backend.ErrInvalidURL), errors.Is(err, backend.ErrInvalidName), errors.Is(err, backend.ErrInvalidOption):
		return exitInvalid
	case errors.Is(err, backend.ErrPermission):
		return exitPermission
	case errors.Is(err, context.Canceled):
		// Only a signal cancels a subcommand's context: the user ended
		// the wait, the backend did not fail it (an error that also
		// wraps ErrUnavailable says only that no answer had come yet).
		return exitInterrupted
	case errors.Is(err, backend.ErrUnavailable):
		return exitUnavailable
	case errors.Is(err, backend.ErrLeaseLost):
		return exitLockLost
	case errors.Is(err, backend.ErrNotAcquired):
		return exitNotAcquired
	default:
		return exitUnavailable
	}
}

// report prints err with the prefix "fencelock <command>: " and returns its
// exit status (exitCode).
func report(stderr io.Writer, command string, err error) int {
	if errors.Is(err, context.Canceled) {
		printErr(stderr, command, "interrupted: "+err.Error())
		return exitInterrupted
	}
	printErr(stderr, command, err.Error())
	return exitCode(err)
}

// printErr prints msg with one "fencelock <command>: " prefix per line. The
// "fencelock: " prefixes the library puts on its errors (one per wrapping
// layer) are dropped, so that none is repeated.
func printErr(stderr io.Writer, command, msg string) {
	prefix := "fencelock: "
	if command != "" {
		prefix = "fencelock " + command + ": "
	}
	for _, line := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		fmt.Fprintln(stderr, prefix+stripPrefixes(line))
	}
}

// stripPrefixes removes the library's "fencelock: " prefixes from the start
// of line and after each ": ".
func stripPrefixes(line string) string {
	const p = "fencelock: "
	for strings.HasPrefix(line, p) {
		line = line[len(p):]
	}
	for strings.Contains(line, ": "+p) {
		line = strings.ReplaceAll(line, ": "+p, ": ")
	}
	return line
}

// usageErr prints a usage error and a pointer to the help, and returns
// exitUsage.
func usageErr(stderr io.Writer, command, msg string) int {
	printErr(stderr, command, msg)
	fmt.Fprintf(stderr, "run 'fencelock %s -h' for help\n", command)
	return exitUsage
}

// newFlagSet returns a flag set whose Usage prints usage (the text before
// the flags) and the flag defaults on the flag set's output.
func newFlagSet(command, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	return fs
}

// parseFlags parses args with fs, the same way for every subcommand: explicit
// help (-h, -help, --help) prints the usage on stdout and returns exitOK; a
// bad flag prints one error line and a hint on stderr and returns
// exitUsage. ok is true if the command is to go on.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard) // the flag package's own messages are printed below
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		fs.SetOutput(stderr)
		return exitOK, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return exitOK, false
	default:
		fs.SetOutput(stderr)
		return usageErr(stderr, fs.Name(), err.Error()), false
	}
}

// connectTimeoutFlag adds --connect-timeout to fs: how long opening the
// backend may take. Some clients retry an unreachable server forever
// (ZooKeeper's), which would hang the command with no word.
func connectTimeoutFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("connect-timeout", 30*time.Second, "give up reaching the backend after this long (status 69)")
}

// openWithin opens the backend at url with opts, giving up after d. An Open that
// runs out of time returns an error matching backend.ErrUnavailable.
func openWithin(ctx context.Context, url string, d time.Duration, opts ...backend.Option) (*backend.Locker, error) {
	octx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	l, err := backend.Open(octx, url, opts...)
	if err != nil && ctx.Err() == nil && octx.Err() != nil && !errors.Is(err, backend.ErrUnavailable) {
		err = fmt.Errorf("%w: no answer within --connect-timeout %v: %w", backend.ErrUnavailable, d, err)
	}
	return l, err
}

// parseInterspersed parses args with fs as parseFlags does, but lets flags
// follow the positional arguments too ("status --url U NAME --watch"): Go's
// flag package stops at the first argument that is not a flag, so each
// positional argument is set aside and the rest parsed again. After "--"
// every argument is positional. It returns the positional arguments, in
// order. For the subcommands whose positional arguments are names or a
// URL; not for run and elect, whose command follows the flags.
func parseInterspersed(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (positional []string, code int, ok bool) {
	for {
		if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
			return nil, code, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, exitOK, true
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" && !flagValue(fs, args[:used]) {
			return append(positional, rest...), exitOK, true
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// flagValue reports whether the last of the parsed args is the value of a
// flag ("--url --"), not the "--" that ends the flags.
func flagValue(fs *flag.FlagSet, parsed []string) bool {
	if len(parsed) < 2 {
		return false
	}
	prev := strings.TrimLeft(parsed[len(parsed)-2], "-")
	if prev == "" || strings.Contains(prev, "=") || !strings.HasPrefix(parsed[len(parsed)-2], "-") {
		return false
	}
	f := fs.Lookup(prev)
	if f == nil {
		return false
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return false
	}
	return true
}

// checkTTLFlags reports a --ttl or --max-hold the backend at rawURL would
// refuse, before any dial: their signs, then the TTL by the scheme's own
// rules (etcd: whole seconds, at least 1s; Redis: whole milliseconds, ...),
// by putting it in the URL's query and checking that URL as backend.Open
// would (backend.CheckURL), as the chaos campaign does. rawURL must have
// passed backend.CheckURL. The errors match backend.ErrInvalidOption or
// backend.ErrInvalidURL (status 65) and never carry the URL's password.
func checkTTLFlags(rawURL string, ttl, maxHold time.Duration) error {
	switch {
	case ttl < 0:
		return fmt.Errorf("%w: --ttl must be positive, got %v", backend.ErrInvalidOption, ttl)
	case maxHold < 0:
		return fmt.Errorf("%w: --max-hold must not be negative (0 means no limit), got %v", backend.ErrInvalidOption, maxHold)
	case ttl == 0:
		return nil
	}
	return checkAsParam(rawURL, "--ttl", "ttl", ttl)
}

// checkAsParam checks a flag's value d as the URL's query parameter param
// would be checked (rawURL with param set, through backend.CheckURL).
func checkAsParam(rawURL, flag, param string, d time.Duration) error {
	u, err := urlkit.Parse(rawURL)
	if err != nil {
		return err
	}
	q, err := urlkit.Query(u)
	if err != nil {
		return err
	}
	q.Set(param, d.String())
	if err := backend.CheckURL(withQuery(rawURL, q)); err != nil {
		return fmt.Errorf("%w: %s %v: %w", backend.ErrInvalidOption, flag, d, err)
	}
	return nil
}

// withQuery returns rawURL with its query replaced by q. (u.String()
// would write "mem://" back as "mem:", which is not a mem URL.)
func withQuery(rawURL string, q neturl.Values) string {
	base, _, _ := strings.Cut(rawURL, "#")
	base, _, _ = strings.Cut(base, "?")
	return base + "?" + q.Encode()
}

// checkLockDelayFlag reports a --lock-delay the backend at rawURL would
// refuse, before any dial: a negative one, or a positive one on a backend
// that cannot enforce a lock-delay, checked as checkTTLFlags checks --ttl
// (the URL with lock_delay set, through backend.CheckURL). rawURL must
// have passed backend.CheckURL.
func checkLockDelayFlag(rawURL string, delay time.Duration) error {
	switch {
	case delay < 0:
		return fmt.Errorf("%w: --lock-delay must not be negative (0 means none), got %v", backend.ErrInvalidOption, delay)
	case delay == 0:
		return nil
	}
	return checkAsParam(rawURL, "--lock-delay", "lock_delay", delay)
}

// redact returns rawURL for output without its secrets (urlkit.Redact: the
// password replaced by xxxxx); a URL that does not parse is not echoed at
// all, since url.Parse may have misread where its password ends.
func redact(rawURL string) string {
	u, err := neturl.Parse(rawURL)
	if err != nil {
		return "(a URL that does not parse)"
	}
	if r := urlkit.Redact(u); r != u.String() {
		return r
	}
	return rawURL // nothing hidden: as written ("mem://", where String gives "mem:")
}

// lockDelayUsage is the help of --lock-delay (run, elect).
const lockDelayUsage = "if the lease ends other than by release (crash, partition, revocation), grant the lock to nobody for this long after (for a resource that cannot check tokens; costs availability: a crashed holder's lock is free after TTL + this); 0: none"
