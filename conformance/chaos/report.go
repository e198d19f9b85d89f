package chaos

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/anishathalye/porcupine"
)

// The hold colours of the timeline, by outcome.
var holdColours = map[string]string{
	phaseOK:    "#b7e4c7", // its write was accepted
	phaseStale: "#ffd6a5", // the guard rejected it as stale
	phaseError: "#e0e0e0", // failed otherwise
	opLost:     "#ffadad", // the loss signal fired before Release
}

// writeReports writes summary.json, timeline.html and report.html.
func writeReports(res *Result, h *history, info porcupine.LinearizationInfo) error {
	b, err := json.MarshalIndent(res.Summary, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(res.Dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	info.AddAnnotations(annotations(h))
	if err := porcupine.VisualizePath(registerModel.ToModel(), info, filepath.Join(res.Dir, "timeline.html")); err != nil {
		return fmt.Errorf("chaos: timeline: %w", err)
	}
	f, err := os.Create(filepath.Join(res.Dir, "report.html"))
	if err != nil {
		return err
	}
	if err := reportPage.Execute(f, pageData{Summary: res.Summary, Rows: res.Summary.rows(), Colours: holdColours}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// annotations mark every hold on its worker's row, coloured by outcome,
// and every fault on the nemesis row.
func annotations(h *history) []porcupine.Annotation {
	var as []porcupine.Annotation
	for _, ho := range h.holds {
		outcome := ho.outcome
		if ho.lost {
			outcome = opLost
		}
		desc := fmt.Sprintf("hold #%d", ho.token)
		if outcome != "" {
			desc += " " + outcome
		}
		as = append(as, porcupine.Annotation{
			ClientId: ho.worker, Start: ho.start, End: ho.end, Description: desc,
			Details:         fmt.Sprintf("token %d, held %v", ho.token, time.Duration(ho.end-ho.start).Round(time.Millisecond)),
			BackgroundColor: holdColours[outcome],
		})
	}
	for _, f := range h.spans() {
		as = append(as, porcupine.Annotation{
			Tag: "nemesis", Start: f.start, End: f.end, Description: fmt.Sprintf("%s %s", f.kind, f.target),
			Details: f.err, BackgroundColor: "#cdb4db",
		})
	}
	return as
}

// row is one line of the checker's table.
type row struct {
	Check, Value string
	Bad          bool // a violation
}

func (s Summary) rows() []row {
	faults := ""
	for _, f := range AllFaults {
		if n, ok := s.Faults[f]; ok {
			faults += fmt.Sprintf("%s %d  ", f, n)
		}
	}
	gaps := ""
	for _, f := range AllFaults {
		if g, ok := s.LongestGapSeconds[f]; ok {
			gaps += fmt.Sprintf("%s %.1fs  ", f, g)
		}
	}
	d := func(n int) string { return fmt.Sprint(n) }
	rows := []row{
		{"lock service", s.URL, false},
		{"guard", string(s.Guard), false},
		{"Redis client", s.RedisClient, false},
		{"workers, TTL, duration", fmt.Sprintf("%d, %gs, %.0fs", s.Workers, s.TTLSeconds, s.DurationSeconds), false},
		{"grants (per second)", fmt.Sprintf("%d (%.1f/s)", s.Grants, s.GrantsPerSecond), s.ShortOf != ""},
		{"faults", faults, false},
		{"writes accepted / stale / unknown", fmt.Sprintf("%d / %d / %d", s.WritesAccepted, s.WritesStale, s.WritesUnknown), false},
		{"final counter", fmt.Sprint(s.FinalCounter), false},
		{"stale writes accepted (must be 0)", d(s.StaleWritesAccepted), s.StaleWritesAccepted > 0},
		{"lost updates (must be 0)", d(s.LostUpdates), s.LostUpdates > 0},
		{"token anomalies (must be 0)", d(s.TokenAnomalies), s.TokenAnomalies > 0},
		{"overlapping holds (caught by the guard)", fmt.Sprintf("%d (%d)", s.Overlaps, s.OverlapsCaught), false},
		{"loss signal after the next grant (of partitions of a holder)", fmt.Sprintf("%d (of %d)", s.LossSignalLate, s.PartitionsOfHolder), s.LossSignalLate > 0},
		{"longest time without a grant, during a fault or a TTL after", gaps, false},
		{"longest time between two grants", fmt.Sprintf("%.1fs", s.LongestGapOverallSeconds), false},
		{"workers that exited unbidden (must be 0)", d(s.UnexpectedExits), s.UnexpectedExits > 0},
		{"faults that failed (must be 0)", d(s.FaultErrors), s.FaultErrors > 0},
		{"linearizable as a fenced register (porcupine)", s.Linearizable, s.Linearizable != "ok"},
	}
	return slices.DeleteFunc(rows, func(r row) bool { return r.Value == "" })
}

// WriteText writes the checker's table, one line per figure, and the
// violations.
func (s Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, r := range s.rows() {
		mark := ""
		if r.Bad {
			mark = "  ✗"
		}
		fmt.Fprintf(tw, "%s\t%s%s\n", r.Check, r.Value, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Violations) == 0 {
		_, err := fmt.Fprintln(w, "no violation")
		return err
	}
	for _, v := range slices.Sorted(slices.Values(s.Violations)) {
		if _, err := fmt.Fprintln(w, "VIOLATION: "+v); err != nil {
			return err
		}
	}
	return nil
}

type pageData struct {
	Summary Summary
	Rows    []row
	Colours map[string]string
}

var reportPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>fencelock chaos: {{.Summary.URL}}</title>
<style>
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; }
td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
td.bad { background: #ffadad; font-weight: bold; }
.key span { display: inline-block; padding: 0.1em 0.5em; margin-right: 0.5em; }
iframe { width: 100%; height: 75vh; border: 1px solid #ccc; margin-top: 1em; }
</style></head><body>
<h1>fencelock chaos campaign</h1>
{{if .Summary.Violations}}<p><b>{{len .Summary.Violations}} violation(s):</b></p><ul>{{range .Summary.Violations}}<li>{{.}}</li>{{end}}</ul>
{{else}}<p><b>No violation.</b></p>{{end}}
<table>{{range .Rows}}<tr><td>{{.Check}}</td><td{{if .Bad}} class="bad"{{end}}>{{.Value}}</td></tr>{{end}}</table>
<p class="key">Holds on the timeline, one row per worker:
<span style="background:{{index .Colours "ok"}}">write accepted</span>
<span style="background:{{index .Colours "stale"}}">rejected as stale</span>
<span style="background:{{index .Colours "lost"}}">lease lost</span>
<span style="background:{{index .Colours "error"}}">failed otherwise</span>
faults on the nemesis row; the guarded counter's steps as porcupine draws them.
<a href="timeline.html">Open the timeline on its own</a>, and the raw <a href="history.jsonl">history</a>
and <a href="summary.json">summary</a>.</p>
<iframe src="timeline.html"></iframe>
</body></html>
`))
