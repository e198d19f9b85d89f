package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/conformance"
)

const conformanceUsage = `usage: fencelock conformance [flags] URL

Runs the conformance suite against the backend at URL (your own cluster:
give every host its port), without go test, and prints a table of cases.
Flags may also follow URL. mem:// runs it against this binary's in-process
mem adapter, on a server of the run's own (without query parameters; no
partition case, as there is no network).
It first checks that every host answers and takes and releases a probe
lock: a backend it cannot reach fails in seconds. The suite's settings are
those the URL's scheme declares (ZooKeeper's are read from the session
timeouts the server grants); -ttl, -min-ttl, -max-ttl and -fifo override
them. Each client reaches the backend through its own proxy on 127.0.0.1,
so the suite can cut one off to play a crash. Cases run 8 at a time
(-parallel), each on lock names of its own; -parallel 1 runs them one
after the other, for a cluster that limits a client's connections.

Exit status: 0 if every case passed, 1 if any failed; otherwise as for
every command (65 for an invalid URL or settings, 69 if the backend cannot
be reached, 77 if it refuses the credentials):
` + exitTable + `
flags:
`

// childEnv marks the process that runs the suite itself: testing.Main ends
// with os.Exit, so the command runs it in a child and reads its -test.v
// output.
const childEnv = "FENCELOCK_CONFORMANCE_URL"

// capsEnv carries the capabilities to the child, as the parent resolved
// them: "fifo,ttl,min-ttl,max-ttl".
const capsEnv = "FENCELOCK_CONFORMANCE_CAPS"

// parallelEnv carries -parallel to the child.
const parallelEnv = "FENCELOCK_CONFORMANCE_PARALLEL"

func encodeCaps(c conformance.Capabilities) string {
	if c == (conformance.Capabilities{}) {
		return ""
	}
	return fmt.Sprintf("%t,%v,%v,%v,%t", c.FIFO, c.TTL, c.MinTTL, c.MaxTTL, c.LockDelay)
}

func decodeCaps(s string) (conformance.Capabilities, error) {
	var c conformance.Capabilities
	if s == "" {
		return c, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != 5 {
		return c, fmt.Errorf("bad %s %q", capsEnv, s)
	}
	var err error
	c.FIFO, c.LockDelay = parts[0] == "true", parts[4] == "true"
	for i, d := range []*time.Duration{&c.TTL, &c.MinTTL, &c.MaxTTL} {
		if *d, err = time.ParseDuration(parts[i+1]); err != nil {
			return c, fmt.Errorf("bad %s %q: %w", capsEnv, s, err)
		}
	}
	return c, nil
}

func conformanceCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("conformance", conformanceUsage)
	run := fs.String("run", "", "run only the cases matching this regular expression (as go test -run, under TestConformance/)")
	overrideCaps := conformance.CapabilityFlags(fs, "")
	verbose := fs.Bool("v", false, "print the suite's full output")
	parallel := fs.Int("parallel", conformance.DefaultParallel, "run this many cases at once (1: one after the other, for a cluster that limits a client's connections)")
	urls, code, ok := parseInterspersed(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if *parallel < 1 {
		return usageErr(stderr, "conformance", fmt.Sprintf("-parallel %d: want 1 or more", *parallel))
	}
	url := os.Getenv("FENCELOCK_URL")
	if len(urls) > 0 {
		url = urls[0]
	}
	switch {
	case url == "":
		return usageErr(stderr, "conformance", "no backend URL: give it as the argument or set FENCELOCK_URL")
	case len(urls) > 1:
		return usageErr(stderr, "conformance", "give one URL")
	}
	// The URL, its hosts' ports and -ttl first, without dialling: 65 at
	// once, not after a connection.
	if err := backend.CheckURL(url); err != nil {
		return report(stderr, "conformance", err)
	}
	inProcess := isMemURL(url)
	check := conformance.CheckURL
	if inProcess {
		check = checkMemURL
	}
	var given conformance.Capabilities
	overrideCaps(&given)
	for _, err := range []error{check(url), checkTTLFlags(url, given.TTL, 0)} {
		if err != nil {
			return report(stderr, "conformance", err)
		}
	}
	// Reachability next: one line in seconds, not every case failing.
	var caps conformance.Capabilities
	var err error
	if inProcess {
		caps, err = memCapabilities(ctx)
	} else {
		caps, err = conformance.URLCapabilities(ctx, url)
	}
	if err != nil {
		return report(stderr, "conformance", err)
	}
	overrideCaps(&caps)
	if err := conformance.CheckCapabilities(caps); err != nil {
		return report(stderr, "conformance", fmt.Errorf("%w: %w", backend.ErrInvalidOption, err))
	}
	self, err := os.Executable()
	if err != nil {
		return report(stderr, "conformance", err)
	}
	childArgs := []string{"-test.v=true", "-test.timeout=30m"}
	if *run != "" {
		childArgs = append(childArgs, "-test.run=^TestConformance$/("+*run+")")
	}
	cmd := exec.CommandContext(ctx, self, childArgs...)
	cmd.Env = append(os.Environ(), childEnv+"="+url, capsEnv+"="+encodeCaps(caps), parallelEnv+"="+strconv.Itoa(*parallel))
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return report(stderr, "conformance", err)
	}
	fmt.Fprintf(stdout, "conformance suite against %s\n", redact(url))
	fmt.Fprintf(stdout, "settings: ttl %v, min-ttl %v, max-ttl %v, fifo %t\n", caps.TTL, caps.MinTTL, caps.MaxTTL, caps.FIFO)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return report(stderr, "conformance", err)
	}
	results := readResults(out, stdout, *verbose)
	waitErr := cmd.Wait()
	failed := printTable(stdout, results, time.Since(start))
	if failed > 0 || waitErr != nil {
		return 1
	}
	return 0
}

// caseResult is one case (or sub-case) of the suite.
type caseResult struct {
	name    string // below TestConformance/
	status  string // PASS, FAIL or SKIP
	elapsed string
	output  []string // the lines logged by a failed case
}

// caseHeader is go test -v's line that starts (or resumes) the output of a
// case of the suite.
var caseHeader = regexp.MustCompile(`^=== (?:RUN|NAME|CONT)\s+TestConformance/(\S+)`)

var resultLine = regexp.MustCompile(`^(\s*)--- (PASS|FAIL|SKIP): TestConformance/(\S+) \(([0-9.]+s)\)`)

// readResults reads the child's -test.v output, showing each top-level case
// as it finishes.
func readResults(r io.Reader, stdout io.Writer, verbose bool) []caseResult {
	var results []caseResult
	// go test -v prints a test's result lines only once its parent has
	// ended, all together; the output of each case follows its "=== RUN"
	// (or "=== NAME", "=== CONT") header, so it is kept by case name.
	output := map[string][]string{}
	current := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if verbose {
			fmt.Fprintln(stdout, line)
		}
		if h := caseHeader.FindStringSubmatch(line); h != nil {
			current = h[1]
			continue
		}
		m := resultLine.FindStringSubmatch(line)
		if m == nil {
			if !strings.HasPrefix(line, "=== ") && current != "" {
				output[current] = append(output[current], line)
			}
			continue
		}
		res := caseResult{name: m[3], status: m[2], elapsed: m[4]}
		if res.status == "FAIL" {
			res.output = output[res.name]
		}
		delete(output, res.name)
		results = append(results, res)
		if !verbose && !strings.Contains(res.name, "/") {
			mark := map[string]string{"PASS": "ok  ", "FAIL": "FAIL", "SKIP": "skip"}[res.status]
			fmt.Fprintf(stdout, "  %s %-28s %8s\n", mark, res.name, res.elapsed)
		}
	}
	return results
}

// printTable prints the cases in the order they ran, top-level cases with
// their time, failed sub-cases with what they logged, and returns how many
// failed.
func printTable(w io.Writer, results []caseResult, elapsed time.Duration) int {
	fmt.Fprintf(w, "\n%-40s %-6s %8s\n", "case", "result", "time")
	failed, passed := 0, 0
	for _, r := range results {
		top := !strings.Contains(r.name, "/")
		if !top && r.status != "FAIL" {
			continue
		}
		indent := ""
		if !top {
			indent = "  "
		}
		fmt.Fprintf(w, "%-40s %-6s %8s\n", indent+r.name, r.status, r.elapsed)
		if r.status == "FAIL" {
			for _, l := range r.output {
				fmt.Fprintf(w, "      %s\n", strings.TrimSpace(l))
			}
		}
		if top {
			switch r.status {
			case "FAIL":
				failed++
			case "PASS":
				passed++
			}
		}
	}
	fmt.Fprintf(w, "\n%d passed, %d failed in %v\n", passed, failed, elapsed.Round(time.Second))
	return failed
}

// runConformanceChild runs the suite in this process as go test would and
// exits; see childEnv.
func runConformanceChild(url string) {
	caps, err := decodeCaps(os.Getenv(capsEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(exitUsage)
	}
	var h conformance.Harness
	if isMemURL(url) {
		h = newMemHarness(caps)
	} else {
		uh, err := conformance.NewURLHarness(url, caps)
		if err != nil {
			fmt.Fprintln(os.Stderr, stripPrefixes(err.Error()))
			os.Exit(exitInvalid)
		}
		h = uh
	}
	tests := []testing.InternalTest{{Name: "TestConformance", F: func(t *testing.T) {
		if c, ok := h.(interface{ Close() error }); ok {
			t.Cleanup(func() { _ = c.Close() })
		}
		parallel, err := strconv.Atoi(os.Getenv(parallelEnv))
		if err != nil {
			parallel = conformance.DefaultParallel
		}
		conformance.Run(t, h, conformance.WithParallel(parallel))
	}}}
	testing.Main(func(pat, str string) (bool, error) { return regexp.MatchString(pat, str) }, tests, nil, nil)
}
