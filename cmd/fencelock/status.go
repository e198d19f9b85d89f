package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/fencelock/fencelock/backend"
)

const statusUsage = `usage: fencelock status --url URL [--json] NAME

Shows who holds the lock NAME (holder, token, TTL left, the backend's id of
the acquisition, metadata) and who waits for it, where the backend can tell. Exit status as for fencelock run:
64 usage, 65 invalid URL or name, 69 backend unavailable.

flags:
`

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, statusUsage); fs.PrintDefaults() }
	url := fs.String("url", os.Getenv("FENCELOCK_URL"), "backend URL (default $FENCELOCK_URL)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 || *url == "" {
		fs.Usage()
		return exitUsage
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
		_ = enc.Encode(st)
		return 0
	}
	if st.Holder == nil {
		fmt.Fprintf(stdout, "lock %q is free\n", st.Name)
		return 0
	}
	fmt.Fprintf(stdout, "lock %q held by %s\n", st.Name, describe(*st.Holder))
	if len(st.Waiters) > 0 {
		fmt.Fprintf(stdout, "%d waiting:\n", len(st.Waiters))
		for i, w := range st.Waiters {
			fmt.Fprintf(stdout, "  %d. %s\n", i+1, describe(w))
		}
	}
	return 0
}

func describe(e backend.Entry) string {
	holder := e.Holder
	if holder == "" {
		holder = "(unnamed holder)"
	}
	parts := []string{holder}
	if e.Token != 0 {
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
