// Command benchreport writes the Markdown table and the SVG chart of the
// benchmarks beside their anchors from go test -bench output files, one per
// backend, named after it (etcd.txt, zookeeper.txt, redis.txt, floor.txt).
// scripts/bench runs the benchmarks and then this:
//
//	go run ./internal/benchreport/cmd/benchreport -md docs/bench.md -svg docs/bench.svg docs/bench/*.txt
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock/internal/benchreport"
)

func main() {
	md := flag.String("md", "docs/bench.md", "the Markdown report to write")
	svg := flag.String("svg", "docs/bench.svg", "the SVG chart to write (\"\": none)")
	took := flag.String("took", "", "how long the benchmarks ran, for the report")
	command := flag.String("command", "scripts/bench", "the command that ran the benchmarks, for the report")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: benchreport [flags] backend.txt...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*md, *svg, *took, *command, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(md, svg, took, command string, files []string) error {
	rep, err := benchreport.Read(files...)
	if err != nil {
		return err
	}
	info := benchreport.RunInfo{Command: command, Took: took}
	if svg != "" {
		var chart bytes.Buffer
		if err := rep.Chart(&chart); err != nil {
			return err
		}
		if err := os.WriteFile(svg, chart.Bytes(), 0o644); err != nil {
			return err
		}
		if info.Chart, err = filepath.Rel(filepath.Dir(md), svg); err != nil {
			return err
		}
	}
	var table bytes.Buffer
	if err := rep.Markdown(&table, info); err != nil {
		return err
	}
	return os.WriteFile(md, table.Bytes(), 0o644)
}
