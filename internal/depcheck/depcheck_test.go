package depcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/fencelock/fencelock"

// userPatterns are the packages a user imports: the contract, the adapters,
// the in-memory backend, fencing and every guard under it (new ones too).
var userPatterns = []string{"./backend/...", "./etcd/...", "./zookeeper/...", "./redis/...", "./postgres/...", "./fencing/...", "./election/..."}

// allowed lists, per user-facing package, the forbidden packages it may
// link anyway, with the reason.
var allowed = map[string]map[string]string{
	module + "/fencing/fencetest": {
		"testing": "the conformance suite a Guard's own tests run: it takes a *testing.T",
	},
}

// forbidden says why a package must not be linked into a user's binary, or
// "" if it may be.
func forbidden(path string) string {
	switch {
	case path == "testing":
		return "the test framework (its flags and its init)"
	case strings.HasPrefix(path, "github.com/stretchr/testify"):
		return "testify, a test-only library"
	case strings.HasPrefix(path, "github.com/ory/dockertest"):
		return "dockertest and the Docker client, for tests only"
	case strings.HasPrefix(path, "go.etcd.io/etcd/server/"):
		return "the etcd server (only the CLI's demo embeds it)"
	case strings.HasPrefix(path, module+"/internal/") && strings.HasSuffix(path, "test"):
		return "one of this module's test servers or helpers"
	}
	return ""
}

type goPackage struct {
	ImportPath   string
	Name         string
	Dir          string
	Imports      []string
	TestGoFiles  []string
	XTestGoFiles []string
	Error        *struct{ Err string }
}

// goList runs go list -json with args in the module root and decodes its
// stream of packages.
func goList(t *testing.T, args ...string) []goPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.Bytes())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list %v: decoding: %v", args, err)
		}
		if p.Error != nil {
			t.Fatalf("go list %v: %s: %s", args, p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v %q", err, out)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// violation is a forbidden package reached from root, by path (root first).
type violation struct {
	root, dep, why string
	path           []string
}

func (v violation) String() string {
	return fmt.Sprintf("%s links %s (%s): %s", v.root, v.dep, v.why, strings.Join(v.path, " -> "))
}

// findForbidden walks the import graph from root breadth first and returns
// every forbidden package it reaches (through forbidden ones too), each with
// a shortest import path.
func findForbidden(graph map[string][]string, root string, skip map[string]string) []violation {
	from := map[string]string{root: ""}
	queue := []string{root}
	var found []violation
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if why := forbidden(p); why != "" && p != root {
			if _, ok := skip[p]; !ok {
				var path []string
				for q := p; q != ""; q = from[q] {
					path = append(path, q)
				}
				slices.Reverse(path)
				found = append(found, violation{root: root, dep: p, why: why, path: path})
			}
		}
		for _, q := range graph[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
	return found
}

// importGraph returns the import graph of pkgs and all their dependencies
// (non-test builds), and the import paths pkgs matched.
func importGraph(t *testing.T, patterns ...string) (graph map[string][]string, roots []string) {
	t.Helper()
	for _, p := range goList(t, patterns...) {
		roots = append(roots, p.ImportPath)
	}
	graph = map[string][]string{}
	for _, p := range goList(t, append([]string{"-deps"}, patterns...)...) {
		graph[p.ImportPath] = p.Imports
	}
	return graph, roots
}

func TestUserPackagesLinkNoTestCode(t *testing.T) {
	graph, roots := importGraph(t, userPatterns...)
	for _, want := range []string{"backend", "backend/mem", "etcd", "zookeeper", "redis", "fencing", "fencing/sqlfence"} {
		if !slices.Contains(roots, module+"/"+want) {
			t.Fatalf("%s is not among the checked packages %v", want, roots)
		}
	}
	for _, root := range roots {
		for _, v := range findForbidden(graph, root, allowed[root]) {
			t.Errorf("%v", v)
		}
	}
}

// The check is not blind: the CLI embeds the etcd server for its demo, and
// the walk finds it with the path that brings it in.
func TestCheckFindsTheCLIsEmbeddedEtcd(t *testing.T) {
	graph, roots := importGraph(t, "./cmd/fencelock")
	var server *violation
	for _, v := range findForbidden(graph, roots[0], nil) {
		if strings.HasPrefix(v.dep, "go.etcd.io/etcd/server/") {
			server = &v
			break
		}
	}
	if server == nil {
		t.Fatalf("no path from %s to the etcd server found: the dependency check is blind", roots[0])
	}
	if len(server.path) < 3 || server.path[0] != roots[0] {
		t.Fatalf("implausible path: %v", server)
	}
	t.Logf("as expected: %v", server)
}

func TestFindForbiddenNamesThePath(t *testing.T) {
	graph := map[string][]string{
		"a":                         {"fmt", "b"},
		"b":                         {"c", module + "/internal/zktest"},
		"c":                         {"testing"},
		module + "/internal/zktest": {"testing"},
		"fmt":                       nil,
	}
	var got []string
	for _, v := range findForbidden(graph, "a", nil) {
		got = append(got, strings.Join(v.path, ">"))
	}
	want := []string{"a>b>" + module + "/internal/zktest", "a>b>c>testing"} // the shortest path to testing
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if v := findForbidden(graph, "c", map[string]string{"testing": "allowed"}); len(v) != 0 {
		t.Fatalf("allowed dependency reported: %v", v)
	}
}

// Every Example in the module is a program a user can copy: go/doc can make
// a standalone program of it (it lives in a package's _test package and uses
// nothing declared in another test file), and that program imports no
// internal package, which a user's module cannot import.
func TestExamplesAreUserPrograms(t *testing.T) {
	n := 0
	for _, p := range goList(t, "./...") {
		for _, name := range append(slices.Clone(p.TestGoFiles), p.XTestGoFiles...) {
			file := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for _, ex := range doc.Examples(f) {
				n++
				for _, problem := range exampleProblems(f, ex) {
					t.Errorf("%s: Example%s: %s", file, ex.Name, problem)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no Example found: the walk is blind")
	}
	t.Logf("%d examples checked", n)
}

func exampleProblems(f *ast.File, ex *doc.Example) []string {
	if ex.Play == nil {
		if !strings.HasSuffix(f.Name.Name, "_test") {
			return []string{fmt.Sprintf("in package %s, not %s_test: go/doc cannot show it as a program a user can run", f.Name.Name, f.Name.Name)}
		}
		return []string{"uses something declared outside its file (a test helper?): go/doc cannot make a standalone program of it"}
	}
	var problems []string
	for _, path := range imports(ex.Play) {
		if isInternal(path) {
			problems = append(problems, fmt.Sprintf("imports %s, which a user cannot import", path))
		}
		if path == contract {
			problems = append(problems, fmt.Sprintf("imports %s, the adapter's contract, which a user's program never needs", path))
		}
	}
	return problems
}

// imports returns the import paths of f's import declarations (go/doc's
// synthesized files leave ast.File.Imports empty).
func imports(f *ast.File) []string {
	var paths []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			for _, s := range g.Specs {
				if path, err := strconv.Unquote(s.(*ast.ImportSpec).Path.Value); err == nil {
					paths = append(paths, path)
				}
			}
		}
	}
	return paths
}

// contract is the adapter's contract: adapters implement it, users never
// import it.
const contract = module + "/backend/driver"

// The example programs are what a user writes: open, acquire, token, loss
// signal, release, guard. None of it needs the adapter's contract.
func TestExampleProgramsUseNoAdapterContract(t *testing.T) {
	pkgs := goList(t, "./examples/...")
	if len(pkgs) == 0 {
		t.Fatal("no example program found: the check is blind")
	}
	for _, p := range pkgs {
		if slices.Contains(p.Imports, contract) {
			t.Errorf("%s imports %s", p.ImportPath, contract)
		}
	}
}

func isInternal(path string) bool {
	for _, elem := range strings.Split(path, "/") {
		if elem == "internal" {
			return true
		}
	}
	return false
}
