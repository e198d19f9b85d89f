package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
)

// driverPkg defines Register.
const driverPkg = "github.com/fencelock/fencelock/backend/driver"

// registrar is a package of the module that calls driver.Register, with
// the scheme names it passes as string constants (a name computed some
// other way is not listed; the import check still catches the package).
type registrar struct {
	pkg     string
	schemes []string
}

// TestEveryAdapterRegistered fails if a package of the module registers a
// URL scheme that the fencelock command does not know: every package that
// calls driver.Register (found by parsing the module's sources, so a new
// adapter is found too) must be linked into the command, and every scheme
// it names must be in backend.Schemes() of the built binary.
func TestEveryAdapterRegistered(t *testing.T) {
	t.Parallel()
	regs := findRegistrars(t)
	var pkgs []string
	for _, r := range regs {
		pkgs = append(pkgs, r.pkg)
	}
	// The finder works: it sees the adapters that exist today.
	for _, p := range []string{"backend/mem", "etcd", "zookeeper", "redis"} {
		assert.Contains(t, pkgs, "github.com/fencelock/fencelock/"+p, "findRegistrars missed an adapter")
	}

	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err, "go list -deps")
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	binSchemes := strings.Fields(strings.TrimPrefix(lastLine(binary(t, "version").stdout), "schemes: "))
	for _, r := range regs {
		assert.True(t, deps[r.pkg], "%s registers URL schemes %v but fencelock does not import it: add it to cmd/fencelock/backends.go", r.pkg, r.schemes)
		for _, s := range r.schemes {
			assert.True(t, slices.Contains(binSchemes, s), "scheme %s of %s is missing from the fencelock binary (it knows %v)", s, r.pkg, binSchemes)
			assert.True(t, slices.Contains(backend.Schemes(), s), "scheme %s of %s is not registered", s, r.pkg)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// findRegistrars parses the non-test sources of every package of the
// module and returns those that call driver.Register.
func findRegistrars(t *testing.T) []registrar {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{"\t"}}{{.Dir}}{{"\t"}}{{join .GoFiles " "}}`, "github.com/fencelock/fencelock/...").Output()
	require.NoError(t, err, "go list")
	var regs []registrar
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "\t", 3)
		require.Len(t, f, 3, line)
		if f[0] == driverPkg {
			continue // defines Register
		}
		var r registrar
		found := false
		for _, name := range strings.Fields(f[2]) {
			schemes, ok := registeredIn(t, filepath.Join(f[1], name))
			found = found || ok
			r.schemes = append(r.schemes, schemes...)
		}
		if found {
			r.pkg = f[0]
			slices.Sort(r.schemes)
			regs = append(regs, r)
		}
	}
	return regs
}

// registeredIn reports whether the file calls driver.Register (under
// whatever name the file imports the package), and the scheme names it
// passes as string literals, directly or as the range variable of a loop
// over a literal []string.
func registeredIn(t *testing.T, path string) (schemes []string, found bool) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	local := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == driverPkg {
			local = "driver"
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	if local == "" || local == "_" {
		return nil, false
	}
	// Scheme names ranged over: for _, s := range []string{"a", "b"}.
	rangeVals := map[string][]string{} // by the variable's name

	ast.Inspect(f, func(n ast.Node) bool {
		rs, ok := n.(*ast.RangeStmt)
		if !ok {
			return true
		}
		v, ok := rs.Value.(*ast.Ident)
		lit, ok2 := rs.X.(*ast.CompositeLit)
		if !ok || !ok2 {
			return true
		}
		for _, e := range lit.Elts {
			if s, ok := stringLit(e); ok {
				rangeVals[v.Name] = append(rangeVals[v.Name], s)
			}
		}
		return true
	})
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Register" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != local {
			return true
		}
		found = true
		if len(call.Args) > 0 {
			if s, ok := stringLit(call.Args[0]); ok {
				schemes = append(schemes, s)
			} else if id, ok := call.Args[0].(*ast.Ident); ok {
				schemes = append(schemes, rangeVals[id.Name]...)
			}
		}
		return true
	})
	return schemes, found
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
