package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
)

const leaderUsage = `usage: fencelock leader --url URL [--json] [--watch] NAME

Shows who leads the election NAME: its value, its term (the term's fencing
token) and the backend's id of its campaign, one line:
  election "job": leader "10.0.0.7:8080", term 42, id job/694d...@17
or, when the backend answered that nobody leads:
  election "job": no leader
A backend that cannot be reached is an error (status 69), never "no
leader". Flags may also follow NAME.

--watch prints a line at each change until SIGINT or SIGTERM (status 0): a
new leader, a new value (the leader proclaimed one), no leader, or
"unknown: REASON" while the backend cannot be reached (then the state once
it can). Each line starts with the time it was seen (RFC 3339). Terms are
shown in increasing order; one shorter than --interval may be missed.
--interval without --watch is a usage error.

--json prints one object, or with --watch one object per line; keys are
snake_case, tokens decimal strings (as fencelock status --json):
  {"name": "job", "leader": {"value": "10.0.0.7:8080", "token": "42", "id": "..."}}
"leader" is null when nobody leads. With --watch each object also has
"time" (RFC 3339) and "error": null, or the reason when the backend cannot
be reached (and "leader" is null then).

Exit status: 0 (a leader or none; also for -h and an ended --watch),
64 usage error, 65 invalid URL or name, 69 backend unavailable,
77 permission denied by the backend.

flags:
`

// leaderJSON is the --json output of fencelock leader.
type leaderJSON struct {
	Name   string           `json:"name"`
	Leader *leaderEntryJSON `json:"leader"` // null if nobody leads
}

// leaderEntryJSON is a leader in leaderJSON.
type leaderEntryJSON struct {
	Value string `json:"value"`
	Token string `json:"token"` // decimal; "" for a leader elected without a token (by another library)
	ID    string `json:"id"`
}

// watchJSON is one line of fencelock leader --watch --json.
type watchJSON struct {
	Time string `json:"time"`
	leaderJSON
	Error *string `json:"error"` // null unless the backend could not be read
}

func newLeaderJSON(name string, l *election.Leader) leaderJSON {
	out := leaderJSON{Name: name}
	if l != nil {
		out.Leader = &leaderEntryJSON{Value: l.Value, ID: l.ID}
		if l.Token != 0 {
			out.Leader.Token = l.Token.String()
		}
	}
	return out
}

// leaderFlags are fencelock leader's settings.
type leaderFlags struct {
	url, name       string
	asJSON, watch   bool
	timeout, period time.Duration
}

func leaderCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, code, ok := parseLeader(args, stdout, stderr)
	if !ok {
		return code
	}
	octx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	locker, err := backend.Open(octx, f.url)
	if err != nil {
		return report(stderr, "leader", err)
	}
	defer locker.Close()
	elector, err := election.New(locker, election.WithPollInterval(f.period))
	if err != nil {
		return report(stderr, "leader", err)
	}
	if f.watch {
		return watchLeader(ctx, elector, f, stdout, stderr)
	}
	l, err := elector.Leader(octx, f.name)
	var leader *election.Leader
	switch {
	case errors.Is(err, election.ErrNoLeader):
	case err != nil:
		return report(stderr, "leader", err)
	default:
		leader = &l
	}
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(newLeaderJSON(f.name, leader))
		return exitOK
	}
	fmt.Fprintln(stdout, describeLeader(f.name, leader, nil))
	return exitOK
}

// parseLeader parses and checks leader's command line, flags before or
// after NAME, all of it before any connection is made. ok is false if the
// command is not to go on; code is its exit status then.
func parseLeader(args []string, stdout, stderr io.Writer) (f leaderFlags, code int, ok bool) {
	fs := newFlagSet("leader", leaderUsage)
	fs.StringVar(&f.url, "url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON (see above)")
	fs.BoolVar(&f.watch, "watch", false, "print every change until interrupted")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "give up after this long (status 69); with --watch, reaching the backend at the start")
	fs.DurationVar(&f.period, "interval", election.DefaultPollInterval, "with --watch, how often the leader is read")
	names, code, ok := parseInterspersed(fs, args, stdout, stderr)
	if !ok {
		return f, code, false
	}
	switch {
	case f.url == "":
		return f, usageErr(stderr, "leader", "no backend URL: give --url or set FENCELOCK_URL"), false
	case len(names) != 1:
		return f, usageErr(stderr, "leader", "give one election name"), false
	case f.timeout <= 0:
		return f, usageErr(stderr, "leader", "--timeout must be positive"), false
	case isSet(fs, "interval") && !f.watch:
		return f, usageErr(stderr, "leader", "--interval is for --watch"), false
	case f.period <= 0:
		return f, usageErr(stderr, "leader", "--interval must be positive"), false
	}
	f.name = names[0]
	for _, err := range []error{backend.CheckURL(f.url), backend.ValidateName(f.name)} {
		if err != nil {
			return f, report(stderr, "leader", err), false
		}
	}
	return f, exitOK, true
}

// watchLeader prints every change Observe delivers until ctx ends.
func watchLeader(ctx context.Context, e *election.Elector, f leaderFlags, stdout, stderr io.Writer) int {
	changes, err := e.Observe(ctx, f.name)
	if err != nil {
		return report(stderr, "leader", err)
	}
	enc := json.NewEncoder(stdout)
	for obs := range changes {
		now := time.Now().Format(time.RFC3339Nano)
		if !f.asJSON {
			fmt.Fprintln(stdout, now+" "+describeLeader(f.name, obs.Leader, obs.Err))
			continue
		}
		line := watchJSON{Time: now, leaderJSON: newLeaderJSON(f.name, obs.Leader)}
		if obs.Err != nil {
			msg := stripPrefixes(obs.Err.Error())
			line.Error = &msg
		}
		_ = enc.Encode(line)
	}
	return exitOK
}

// describeLeader formats who leads in one line for the text output: l, or
// nobody (l nil), or unknown (err set).
func describeLeader(name string, l *election.Leader, err error) string {
	head := fmt.Sprintf("election %q: ", name)
	switch {
	case err != nil:
		return head + "unknown: " + strings.ReplaceAll(stripPrefixes(err.Error()), "\n", "; ")
	case l == nil:
		return head + "no leader"
	}
	parts := []string{fmt.Sprintf("leader %q", l.Value)}
	if l.Token != 0 {
		parts = append(parts, "term "+l.Token.String())
	}
	if l.ID != "" {
		parts = append(parts, "id "+l.ID)
	}
	return head + strings.Join(parts, ", ")
}
