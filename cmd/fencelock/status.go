package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

const statusUsage = `usage: fencelock status --url URL [--json] [--timeout D] [--watch [--interval D]] NAME

Shows who holds the lock NAME (holder, token, TTL left, the backend's id of
the acquisition, metadata) and who waits for it, where the backend can tell.
Flags may also follow NAME.

--json prints one object; keys are snake_case, durations are seconds
(float64, keys ending in _seconds), tokens are decimal strings:
  {"name": "job",
   "holder": {"id": "...", "holder": "worker-a", "token": "42",
              "ttl_left_seconds": 9.5, "metadata": {"k": "v"}},
   "waiters": [ ...entries as holder... ]}
"holder" is null when the lock is free, "waiters" [] when none wait;
"ttl_left_seconds" is null and "token" "" where the backend cannot tell.

--watch reads the status every --interval (default 100ms) and prints it in
one line, then a line at each change (a new holder or token, the lock
freed, the waiters changed) until SIGINT or SIGTERM (status 0), or
"unknown: REASON" while the backend cannot be reached or a read takes
longer than --timeout (then the state once it can). Each line starts with
the time it was seen (RFC 3339):
  2026-01-02T15:04:05.123Z lock "job" held by worker-a, token 42, TTL left 9.5s, id ...; 1 waiting: 1. worker-b, id ...
  2026-01-02T15:04:05.456Z lock "job" is free; holds: 1, p50 350ms, p99 350ms, p99.9 350ms, max 350ms
  2026-01-02T15:04:07.001Z lock "job": unknown: backend unavailable: ...
Once a hold has ended, each line ends with the hold times seen by this
watch since it began (count, p50, p99, p99.9, max), measured from outside
as fencelock advise does: a hold counts if its start and end were both
seen, at most one --interval longer than it was; a hold shorter than
--interval may be missed, and one that ends while the backend cannot be
reached is not counted. --interval without --watch is a usage error.

--json --watch prints one object per line: the object above, "time"
(RFC 3339), "holds" and "error":
  {"time": "...", "name": "job", "holder": {...}, "waiters": [],
   "holds": {"count": 3, "p50_seconds": 0.35, "p99_seconds": 0.4,
             "p999_seconds": 0.4, "max_seconds": 0.4},
   "error": null}
"holds" is null until a hold has ended; "error" is null, or the reason
when the backend cannot be reached (then "holder" is null, "waiters" []).

Exit status: 0 (also for -h and an ended --watch), 64 usage error,
65 invalid URL or name, 69 backend unavailable (with --watch: at the
start) or unable to tell, 77 permission denied by the backend.

flags:
`

// statusJSON is the --json output of fencelock status.
type statusJSON struct {
	Name    string      `json:"name"`
	Holder  *entryJSON  `json:"holder"`  // null if the lock is free
	Waiters []entryJSON `json:"waiters"` // in grant order; never null
}

// entryJSON is one acquisition in statusJSON.
type entryJSON struct {
	ID             string            `json:"id"`
	Holder         string            `json:"holder"`
	Token          string            `json:"token"`            // decimal; "" if unknown
	TTLLeftSeconds *float64          `json:"ttl_left_seconds"` // null if unknown
	Metadata       map[string]string `json:"metadata"`         // never null
	Value          string            `json:"value"`            // backend.Entry.Value: an election candidate's value
}

func newStatusJSON(st backend.Status) statusJSON {
	out := statusJSON{Name: st.Name, Waiters: make([]entryJSON, 0, len(st.Waiters))}
	if st.Holder != nil {
		e := newEntryJSON(*st.Holder)
		out.Holder = &e
	}
	for _, w := range st.Waiters {
		out.Waiters = append(out.Waiters, newEntryJSON(w))
	}
	return out
}

func newEntryJSON(e backend.Entry) entryJSON {
	out := entryJSON{ID: e.ID, Holder: e.Holder, Metadata: e.Metadata, Value: e.Value}
	if e.Token != 0 {
		out.Token = e.Token.String()
	}
	if e.TTLLeft >= 0 {
		s := e.TTLLeft.Seconds()
		out.TTLLeftSeconds = &s
	}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	return out
}

// statusWatchJSON is one line of fencelock status --watch --json.
type statusWatchJSON struct {
	Time string `json:"time"`
	statusJSON
	Holds *holdsJSON `json:"holds"` // null until a hold has ended
	Error *string    `json:"error"` // null unless the backend could not be read
}

// holdsJSON is the hold times seen by fencelock status --watch.
type holdsJSON struct {
	Count       uint64  `json:"count"`
	P50Seconds  float64 `json:"p50_seconds"`
	P99Seconds  float64 `json:"p99_seconds"`
	P999Seconds float64 `json:"p999_seconds"`
	MaxSeconds  float64 `json:"max_seconds"`
}

// statusFlags are fencelock status's settings.
type statusFlags struct {
	url, name         string
	asJSON, watch     bool
	timeout, interval time.Duration
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, code, ok := parseStatus(args, stdout, stderr)
	if !ok {
		return code
	}
	octx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	locker, err := backend.Open(octx, f.url)
	if err != nil {
		return report(stderr, "status", err)
	}
	defer locker.Close()
	if f.watch {
		return watchStatus(ctx, locker, f, stdout, stderr)
	}
	st, err := locker.Status(octx, f.name)
	if err != nil {
		return report(stderr, "status", err)
	}
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(newStatusJSON(st))
		return exitOK
	}
	if st.Holder == nil {
		fmt.Fprintf(stdout, "lock %q is free\n", st.Name)
		return exitOK
	}
	fmt.Fprintf(stdout, "lock %q held by %s\n", st.Name, describe(*st.Holder))
	if len(st.Waiters) > 0 {
		fmt.Fprintf(stdout, "%d waiting:\n", len(st.Waiters))
		for i, w := range st.Waiters {
			fmt.Fprintf(stdout, "  %d. %s\n", i+1, describe(w))
		}
	}
	return exitOK
}

// parseStatus parses and checks status's command line, all of it before
// any connection is made. ok is false if the command is not to go on; code
// is its exit status then.
func parseStatus(args []string, stdout, stderr io.Writer) (f statusFlags, code int, ok bool) {
	fs := newFlagSet("status", statusUsage)
	fs.StringVar(&f.url, "url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON (see above)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "give up after this long (status 69); with --watch, reaching the backend at the start, and each read (unknown)")
	fs.BoolVar(&f.watch, "watch", false, "print every change, and the hold times seen, until interrupted")
	fs.DurationVar(&f.interval, "interval", 100*time.Millisecond, "with --watch, how often the status is read")
	names, code, ok := parseInterspersed(fs, args, stdout, stderr)
	if !ok {
		return f, code, false
	}
	interval := isSet(fs, "interval")
	switch {
	case f.url == "":
		return f, usageErr(stderr, "status", "no backend URL: give --url or set FENCELOCK_URL"), false
	case len(names) != 1:
		return f, usageErr(stderr, "status", "give one lock name"), false
	case f.timeout <= 0:
		return f, usageErr(stderr, "status", "--timeout must be positive"), false
	case interval && !f.watch:
		return f, usageErr(stderr, "status", "--interval is for --watch"), false
	case f.interval <= 0:
		return f, usageErr(stderr, "status", "--interval must be positive"), false
	}
	f.name = names[0]
	for _, err := range []error{backend.CheckURL(f.url), backend.ValidateName(f.name)} {
		if err != nil {
			return f, report(stderr, "status", err), false
		}
	}
	return f, exitOK, true
}

// watchStatus reads the status of lock f.name every f.interval until ctx
// ends, and prints it at each change, with the hold times seen
// (holdWatcher) once a hold has ended. A read that fails is shown as
// unknown, once, and the watch goes on.
func watchStatus(ctx context.Context, l *backend.Locker, f statusFlags, stdout, stderr io.Writer) int {
	ticker := time.NewTicker(f.interval)
	defer ticker.Stop()
	enc := json.NewEncoder(stdout)
	var (
		holds holdWatcher
		shown string // the state printed last (statusKey); "" before the first
	)
	for {
		rctx, cancel := context.WithTimeout(ctx, f.timeout)
		polled := time.Now()
		st, err := l.Status(rctx, f.name)
		timedOut := rctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return exitOK // a signal, not the backend, ended the read
		case errors.Is(err, errors.ErrUnsupported):
			return report(stderr, "status", err) // it never will tell
		case err != nil && timedOut:
			err = fmt.Errorf("no answer within --timeout %v: %w", f.timeout, err)
		}
		key := "?" // unknown
		if err != nil {
			holds.failed()
		} else {
			holds.observe(polled, st)
			key = statusKey(st)
		}
		if key != shown {
			shown = key
			printWatched(stdout, enc, f, polled, st, err, holds.times())
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-ticker.C:
		}
	}
}

// statusKey is what a change of the status changes: the holder and
// waiters, their tokens, identities and values, not their TTLs left.
func statusKey(st backend.Status) string {
	var b strings.Builder
	b.WriteString("=")
	key := func(e backend.Entry) {
		fmt.Fprintf(&b, "%q %q %v %q %q;", e.ID, e.Holder, e.Token, e.Value, e.Metadata)
	}
	if st.Holder != nil {
		key(*st.Holder)
	}
	b.WriteString("|")
	for _, w := range st.Waiters {
		key(w)
	}
	return b.String()
}

// printWatched prints one line of status --watch: st, read at polled, or
// unknown (err set), and the hold times h once a hold has ended.
func printWatched(stdout io.Writer, enc *json.Encoder, f statusFlags, polled time.Time, st backend.Status, err error, h backend.HoldTimes) {
	now := polled.Format(time.RFC3339Nano)
	if !f.asJSON {
		line := now + " " + describeStatus(f.name, st, err)
		if h.Count > 0 {
			line += fmt.Sprintf("; holds: %d, %s", h.Count, holdTimesText(h))
		}
		fmt.Fprintln(stdout, line)
		return
	}
	out := statusWatchJSON{Time: now, statusJSON: statusJSON{Name: f.name, Waiters: []entryJSON{}}}
	if err != nil {
		msg := stripPrefixes(err.Error())
		out.Error = &msg
	} else {
		out.statusJSON = newStatusJSON(st)
	}
	if h.Count > 0 {
		out.Holds = &holdsJSON{Count: h.Count, P50Seconds: h.P50.Seconds(), P99Seconds: h.P99.Seconds(),
			P999Seconds: h.P999.Seconds(), MaxSeconds: h.Max.Seconds()}
	}
	_ = enc.Encode(out)
}

// describeStatus formats the status of lock name in one line for status
// --watch: st, or unknown (err set).
func describeStatus(name string, st backend.Status, err error) string {
	var b strings.Builder
	switch {
	case err != nil:
		return fmt.Sprintf("lock %q: unknown: %s", name, strings.ReplaceAll(stripPrefixes(err.Error()), "\n", "; "))
	case st.Holder == nil:
		fmt.Fprintf(&b, "lock %q is free", name)
	default:
		fmt.Fprintf(&b, "lock %q held by %s", name, describe(*st.Holder))
	}
	if len(st.Waiters) > 0 {
		fmt.Fprintf(&b, "; %d waiting:", len(st.Waiters))
		for i, w := range st.Waiters {
			if i > 0 {
				b.WriteString(";")
			}
			fmt.Fprintf(&b, " %d. %s", i+1, describe(w))
		}
	}
	return b.String()
}

// describe formats an entry in one line for the text output.
func describe(e backend.Entry) string {
	holder := e.Holder
	switch {
	case holder == "" && e.Value != "":
		holder = fmt.Sprintf("candidate %q", e.Value) // an election's
	case holder == "":
		holder = "(unnamed holder)"
	}
	parts := []string{holder}
	if e.Token != fencing.Token(0) {
		parts = append(parts, "token "+e.Token.String())
	}
	if e.TTLLeft >= 0 {
		parts = append(parts, "TTL left "+e.TTLLeft.Round(time.Millisecond).String())
	}
	if e.ID != "" {
		parts = append(parts, "id "+e.ID)
	}
	keys := make([]string, 0, len(e.Metadata))
	for k := range e.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+e.Metadata[k])
	}
	return strings.Join(parts, ", ")
}
