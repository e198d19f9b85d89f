package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

const statusUsage = `usage: fencelock status --url URL [--json] [--timeout D] NAME

Shows who holds the lock NAME (holder, token, TTL left, the backend's id of
the acquisition, metadata) and who waits for it, where the backend can tell.

--json prints one object; keys are snake_case, durations are seconds
(float64, keys ending in _seconds), tokens are decimal strings:
  {"name": "job",
   "holder": {"id": "...", "holder": "worker-a", "token": "42",
              "ttl_left_seconds": 9.5, "metadata": {"k": "v"}},
   "waiters": [ ...entries as holder... ]}
"holder" is null when the lock is free, "waiters" [] when none wait;
"ttl_left_seconds" is null and "token" "" where the backend cannot tell.

Exit status: 0 (also for -h), 64 usage error, 65 invalid URL or name,
69 backend unavailable, 77 permission denied by the backend.

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

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", statusUsage)
	url := fs.String("url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	asJSON := fs.Bool("json", false, "print JSON (see above)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long (status 69)")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	switch {
	case *url == "":
		return usageErr(stderr, "status", "no backend URL: give --url or set FENCELOCK_URL")
	case fs.NArg() != 1:
		return usageErr(stderr, "status", "give one lock name after the flags")
	case *timeout <= 0:
		return usageErr(stderr, "status", "--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	locker, err := backend.Open(ctx, *url)
	if err != nil {
		return report(stderr, "status", err)
	}
	defer locker.Close()
	st, err := locker.Status(ctx, fs.Arg(0))
	if err != nil {
		return report(stderr, "status", err)
	}
	if *asJSON {
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
