package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/fencelock/fencelock/backend"
)

const versionUsage = `usage: fencelock version

Prints the module version of fencelock (v1.2.3 when installed with go
install ...@v1.2.3, "(devel)" when built from a checkout), the Go version
it was built with, the VCS revision and time it was built from when known
("modified" if the tree had local changes), and the backend URL schemes
it knows. Also: fencelock -version, fencelock --version.
`

// versionCmd prints versionText of the running binary's build info.
func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", versionUsage)
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return usageErr(stderr, "version", "version takes no arguments")
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	fmt.Fprint(stdout, versionText(bi, backend.Schemes()))
	return exitOK
}

// versionText formats the version report of build info bi (nil if the
// binary has none) and the registered schemes:
//
//	fencelock v1.2.3
//	go: go1.26.0 linux/amd64
//	revision: 0123abcd... (2026-12-01T06:24:10Z, modified)
//	schemes: etcd etcds mem redis rediss zk zks
func versionText(bi *debug.BuildInfo, schemes []string) string {
	var b strings.Builder
	version, goVersion := "(unknown)", runtime.Version()
	var revision, vcsTime string
	dirty := false
	if bi != nil {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	fmt.Fprintf(&b, "fencelock %s\n", version)
	fmt.Fprintf(&b, "go: %s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	if revision != "" {
		var notes []string
		if vcsTime != "" {
			notes = append(notes, vcsTime)
		}
		if dirty {
			notes = append(notes, "modified")
		}
		fmt.Fprintf(&b, "revision: %s", revision)
		if len(notes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "schemes: %s\n", strings.Join(schemes, " "))
	return b.String()
}
