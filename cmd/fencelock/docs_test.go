package main

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/tlstest"
)

// The docs cannot rot: every command line in the README's and docs/'s
// code blocks is run here (fencelock's) or checked against the tree (go
// test's packages and test names, scripts/' files).

// docLine is one command line of a code block: its words as the shell
// would pass them, where it was found.
type docLine struct {
	where string
	words []string
}

// docCommands returns the command lines of the code blocks (``` fences) of
// the README and of every page in docs/, continuation lines joined,
// comments and leading "$ " dropped, environment assignments kept as
// words.
func docCommands(t *testing.T) []docLine {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	pages = append(pages, "../../README.md")
	require.Greater(t, len(pages), 5, "the docs are where this test expects them")
	var lines []docLine
	for _, page := range pages {
		f, err := os.Open(page)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		inBlock, n, pending, start := false, 0, "", 0
		for sc.Scan() {
			n++
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inBlock, pending = !inBlock, ""
				continue
			}
			if !inBlock {
				continue
			}
			if pending == "" {
				start = n
			}
			if s, ok := strings.CutSuffix(strings.TrimRight(line, " "), `\`); ok {
				pending += s + " "
				continue
			}
			words := shellWords(strings.TrimPrefix(strings.TrimSpace(pending+line), "$ "))
			pending = ""
			if len(words) > 0 {
				lines = append(lines, docLine{filepath.Base(page) + ":" + strconv.Itoa(start), words})
			}
		}
		require.NoError(t, sc.Err())
		require.NoError(t, f.Close())
	}
	return lines
}

// shellWords splits a command line as sh does for the docs' lines: single
// and double quotes, a word starting with # begins a comment; $(...) and
// variables stay as they are written.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case r == '#' && !inWord:
			return words
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// liveServers starts, once each and only if a doc line needs it, a real
// local server of each backend (testBackends), and gives a URL of its
// scheme for a doc's URL.
type liveServers struct {
	mu   sync.Mutex
	urls map[string]func(prefix string) string
}

func (s *liveServers) url(t *testing.T, name string) func(string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, ok := s.urls[name]; ok {
		return u
	}
	for _, b := range testBackends {
		if b.name == name {
			s.urls[name] = b.start(t)
			return s.urls[name]
		}
	}
	t.Fatalf("no test backend %q", name)
	return nil
}

// schemeBackends maps a URL scheme the docs use to its test backend (the
// TLS schemes are only checked: see rewriteURL).
var schemeBackends = map[string]string{"etcd": "etcd", "zk": "zookeeper", "redis": "redis", "postgres": "postgres", "postgresql": "postgres"}

// tlsURL says whether a doc's URL needs TLS, which the local servers here
// do not serve (TLS is tested with servers of its own: TestOpen*TLS*).
func tlsURL(u string) bool {
	for _, p := range []string{"etcds://", "zks://", "rediss://"} {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return strings.Contains(u, "sslmode=verify") || strings.Contains(u, "sslmode=require") || strings.Contains(u, "tls=")
}

// rewriteURL returns the doc's URL u with its hosts (and for PostgreSQL
// its user, password and database) those of the live server of its
// scheme, its path (a key prefix) and parameters kept; ok is false for a
// word that is not a backend URL. A TLS URL is checked (backend.CheckURL,
// everything short of the dial) and returned as it is, with run false.
func rewriteURL(t *testing.T, servers *liveServers, u string) (out string, ok, run bool) {
	scheme, rest, found := strings.Cut(u, "://")
	if !found {
		return u, false, false
	}
	if tlsURL(u) {
		require.NoError(t, backend.CheckURL(withTestFiles(t, u)), "the docs' TLS URL %s", u)
		return u, true, false
	}
	name, known := schemeBackends[scheme]
	if !known {
		return u, scheme == "mem", true
	}
	tail := ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		tail = rest[i:]
	}
	live := servers.url(t, name)("docs")
	if name == "postgres" {
		// The live DSN's database and parameters; the doc's prefix and
		// other parameters after them.
		base, q, _ := strings.Cut(live, "?")
		_, docQuery, _ := strings.Cut(tail, "?")
		return base + "?" + joinQuery(q, docQuery), true, true
	}
	liveScheme, liveRest, _ := strings.Cut(live, "://")
	liveAuthority := liveRest
	if i := strings.IndexAny(liveRest, "/?"); i >= 0 {
		liveAuthority = liveRest[:i]
	}
	return liveScheme + "://" + liveAuthority + tail, true, true
}

// withTestFiles returns u with the files its parameters name (a CA, a
// client certificate and key: /etc/... in the docs) replaced by files
// that exist (tlstest's), which CheckURL reads.
func withTestFiles(t *testing.T, u string) string {
	base, query, found := strings.Cut(u, "?")
	if !found {
		return u
	}
	files := tlstest.New(t)
	byParam := map[string]string{"sslrootcert": files.CA, "cacert": files.CA, "sslcert": files.ClientCert,
		"cert": files.ClientCert, "sslkey": files.ClientKey, "key": files.ClientKey}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if f, ok := byParam[k]; ok {
			parts[i] = k + "=" + f
		}
	}
	return base + "?" + strings.Join(parts, "&")
}

// joinQuery joins two query strings, the second's parameters winning.
func joinQuery(a, b string) string {
	seen := map[string]bool{}
	var parts []string
	for _, p := range strings.Split(b, "&") {
		if p != "" {
			k, _, _ := strings.Cut(p, "=")
			seen[k] = true
			parts = append(parts, p)
		}
	}
	for _, p := range strings.Split(a, "&") {
		k, _, _ := strings.Cut(p, "=")
		if p != "" && !seen[k] && k != "prefix" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "&")
}

// docRunBound is how long a doc's command line runs before it is stopped:
// the quick ones (run, status, leader, demo on a live server) end before
// it; the long ones (--watch, advise, bench, chaos, conformance) must
// still be running then, having started their work, not refused it.
const docRunBound = 3 * time.Second

// docLinesAtOnce is how many doc lines run at once: some start heavy work
// (the conformance suite, a campaign's workers, a bench of 1,000 waiters),
// and all at once loaded the quick tier's other packages past their
// bounds.
const docLinesAtOnce = 3

// TestDocsCommands runs every fencelock command line of the README and
// docs/ as the built binary against a real local server of its URL's
// scheme (the doc's hosts replaced by the server's, its key prefix and
// parameters kept; a command after "--" replaced by true; a fixed metrics
// port by a free one): a line must either end with status 0 or be still
// at work after docRunBound (then SIGTERM ends it: 130, or 0 for a
// watch), never a usage error (64), a rejected URL or option (65) or an
// unreachable backend (69). A TLS URL, which no local
// server here serves, is checked by backend.CheckURL instead.
func TestDocsCommands(t *testing.T) {
	t.Parallel()
	servers := &liveServers{urls: map[string]func(string) string{}}
	slots := make(chan struct{}, docLinesAtOnce)
	var wg sync.WaitGroup
	ran := 0
	for _, l := range docCommands(t) {
		if l.words[0] != "fencelock" {
			continue
		}
		args, runnable := docArgs(t, servers, l.words[1:])
		if !runnable {
			continue
		}
		if args[0] == "chaos" && !slices.Contains(args, "--out") {
			// Its report in the test's directory, not in the tree.
			args = append(args, "--out", filepath.Join(t.TempDir(), "chaos-report"))
		}
		ran++
		wg.Add(1)
		// docLinesAtOnce at a time, each mostly waiting out docRunBound:
		// t.Run from goroutines, as TestURL does.
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			t.Run(l.where, func(t *testing.T) { runDocLine(t, l, args) })
		}()
	}
	wg.Wait()
	assert.Greater(t, ran, 10, "fencelock command lines run from the docs")
}

// runDocLine runs the binary with args, a doc's line l rewritten, and
// checks how it ended (see TestDocsCommands).
func runDocLine(t *testing.T, l docLine, args []string) {
	p := startLive(t, true, args...)
	select {
	case r := <-p.done:
		assert.Equal(t, exitOK, r.code, "%q (from %q)\nstdout:\n%s\nstderr:\n%s", args, l.words, r.stdout, r.stderr)
	case <-time.After(docRunBound):
		p.stop()
		r := p.wait(t)
		for _, bad := range []int{exitUsage, exitInvalid, exitUnavailable} {
			assert.NotEqual(t, bad, r.code, "%q (from %q)\nstdout:\n%s\nstderr:\n%s", args, l.words, r.stdout, r.stderr)
		}
	}
}

// docArgs rewrites a doc's fencelock arguments to run here (see
// TestDocsCommands); runnable is false if a URL in them needs TLS.
func docArgs(t *testing.T, servers *liveServers, words []string) (args []string, runnable bool) {
	runnable = true
	afterDashes := false
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case afterDashes:
			args = append(args, "true")
			return args, runnable
		case w == "--":
			afterDashes = true
			args = append(args, w)
			continue
		case w == "--out" && i+1 < len(words):
			// A report directory of the test's, not one in the tree.
			args = append(args, w, filepath.Join(t.TempDir(), words[i+1]))
			i++
			continue
		case w == "--metrics-addr" && i+1 < len(words):
			port, err := freeport.Port()
			require.NoError(t, err)
			args = append(args, w, "127.0.0.1:"+strconv.Itoa(port))
			i++
			continue
		case w == "install":
			return nil, false // go install ...@latest: not this tree
		}
		if out, isURL, run := rewriteURL(t, servers, w); isURL {
			runnable = runnable && run
			args = append(args, out)
			continue
		}
		args = append(args, w)
	}
	return args, runnable
}

// TestDocsGoTestCommands checks every go test line of the README and
// docs/ against the tree: its packages exist, its -run and -bench
// patterns name a test or benchmark there; and every scripts/ command
// exists and is executable.
func TestDocsGoTestCommands(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, l := range docCommands(t) {
		words := l.words
		for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
			words = words[1:] // VAR=value before the command
		}
		if len(words) == 0 {
			continue
		}
		if strings.HasPrefix(words[0], "scripts/") {
			info, err := os.Stat(filepath.Join("../..", words[0]))
			if assert.NoError(t, err, "%s: %q", l.where, l.words) {
				assert.NotZero(t, info.Mode()&0o111, "%s: %s is not executable", l.where, words[0])
			}
			checked++
			continue
		}
		if len(words) < 2 || words[0] != "go" || words[1] != "test" {
			continue
		}
		checked++
		var pkgs []string
		patterns := map[string]string{}
		for i := 2; i < len(words); i++ {
			w := words[i]
			switch {
			case (w == "-run" || w == "-bench") && i+1 < len(words):
				patterns[w] = words[i+1]
				i++
			case strings.HasPrefix(w, "./"):
				pkgs = append(pkgs, strings.TrimSuffix(w, "/"))
			}
		}
		require.NotEmpty(t, pkgs, "%s: %q names no package", l.where, l.words)
		var names []string
		for _, p := range pkgs {
			names = append(names, testNames(t, l.where, p)...)
		}
		for flag, pat := range patterns {
			if pat == "^$" {
				continue
			}
			top, _, _ := strings.Cut(pat, "/")
			re, err := regexp.Compile(top)
			require.NoError(t, err, "%s: %s %q", l.where, flag, pat)
			prefix := map[string]string{"-run": "Test", "-bench": "Benchmark"}[flag]
			found := false
			for _, n := range names {
				found = found || (strings.HasPrefix(n, prefix) && re.MatchString(n))
			}
			assert.True(t, found, "%s: %s %q matches no %s function in %v", l.where, flag, pat, prefix, pkgs)
		}
	}
	assert.Greater(t, checked, 10, "go test and scripts/ lines checked in the docs")
}

// testNames returns the names of the top-level functions of package dir's
// test files (dir relative to the module's root, "./x").
func testNames(t *testing.T, where, dir string) []string {
	files, err := filepath.Glob(filepath.Join("../..", dir, "*_test.go"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "%s: package %s has no tests", where, dir)
	var names []string
	fs := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fs, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range af.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
				names = append(names, fn.Name.Name)
			}
		}
	}
	return names
}

// The Markdown TestDocsLinks reads: a link's or image's target (](target)
// or ](target "title")), a target with a scheme (http:, mailto:), an
// inline code span (whose text is no link), a heading, and what a heading's
// anchor drops.
var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	mdScheme   = regexp.MustCompile(`^[a-z]+:`)
	mdCodeSpan = regexp.MustCompile("`[^`]*`")
	mdHeading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	mdNotInID  = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// TestDocsLinks checks every relative link of the README, docs/ and the
// examples' and docker/'s READMEs (links in code spans and code blocks
// aside): the file it names exists, and its #anchor, if any, is a heading
// of that page as GitHub names it; and every page of docs/ can be reached
// from the README by its links. Moving a section to another page must
// not leave a link behind, nor the page unlinked.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	var pages []string
	for _, pattern := range []string{"README.md", "docs/*.md", "docs/*/*.md", "docker/*.md", "examples/*.md", "examples/*/*.md"} {
		m, err := filepath.Glob(filepath.Join("../..", pattern))
		require.NoError(t, err)
		pages = append(pages, m...)
	}
	require.Greater(t, len(pages), 10, "the docs are where this test expects them")
	anchors := map[string]map[string]bool{}
	linksTo := map[string][]string{} // page: the pages it links to
	checked := 0
	for _, page := range pages {
		for _, l := range proseLines(t, page) {
			for _, m := range mdLink.FindAllStringSubmatch(mdCodeSpan.ReplaceAllString(l.text, ""), -1) {
				target := m[1]
				if mdScheme.MatchString(target) {
					continue // http:, https:, mailto:
				}
				checked++
				path, frag, _ := strings.Cut(target, "#")
				file := page
				if path != "" {
					file = filepath.Join(filepath.Dir(page), path)
				}
				if _, err := os.Stat(file); !assert.NoError(t, err, "%s:%d: link %q", page, l.n, target) {
					continue
				}
				linksTo[page] = append(linksTo[page], file)
				if frag == "" {
					continue
				}
				if anchors[file] == nil {
					anchors[file] = headingAnchors(t, file)
				}
				assert.True(t, anchors[file][frag], "%s:%d: link %q: no such heading in %s", page, l.n, target, file)
			}
		}
	}
	assert.Greater(t, checked, 50, "relative links checked in the docs")

	readme := filepath.Join("../..", "README.md")
	reached := map[string]bool{readme: true}
	for next := []string{readme}; len(next) > 0; next = next[1:] {
		for _, to := range linksTo[next[0]] {
			if !reached[to] {
				reached[to] = true
				next = append(next, to)
			}
		}
	}
	for _, page := range pages {
		if strings.HasPrefix(page, filepath.Join("../..", "docs")+string(filepath.Separator)) {
			assert.True(t, reached[page], "%s: no link leads there from the README", page)
		}
	}
}

// proseLine is a line of a Markdown page outside its code blocks.
type proseLine struct {
	n    int
	text string
}

// proseLines returns the lines of page outside its ``` code blocks.
func proseLines(t *testing.T, page string) []proseLine {
	t.Helper()
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	var lines []proseLine
	inBlock := false
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			lines = append(lines, proseLine{i + 1, line})
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives page's headings: the
// text lower-cased, without Markdown marks and punctuation but - and _,
// spaces as -, a repeated one suffixed -1, -2, ...
func headingAnchors(t *testing.T, page string) map[string]bool {
	seen := map[string]int{}
	anchors := map[string]bool{}
	for _, l := range proseLines(t, page) {
		m := mdHeading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		text := mdLink.ReplaceAllString(m[1], "]") // a link's text, not its target
		a := strings.ReplaceAll(mdNotInID.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		if n, ok := seen[a]; ok {
			seen[a] = n + 1
			a += "-" + strconv.Itoa(n+1)
		} else {
			seen[a] = 0
		}
		anchors[a] = true
	}
	return anchors
}
