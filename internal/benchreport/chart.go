package benchreport

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The chart's geometry.
const (
	chartWidth   = 10 * vg.Inch
	legendWidth  = 2.2 * vg.Inch
	rowHeight    = 0.36 * vg.Inch
	panelMargins = 1.1 * vg.Inch // title, x axis and its label
)

// implStyles are the glyphs given to fencelock and the anchors in the
// order they first appear (fencelock first).
var implStyles = []draw.GlyphStyle{
	{Color: color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, Radius: vg.Points(4.5), Shape: draw.CircleGlyph{}},
	{Color: color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, Radius: vg.Points(5), Shape: draw.PyramidGlyph{}},
	{Color: color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, Radius: vg.Points(4), Shape: draw.BoxGlyph{}},
	{Color: color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, Radius: vg.Points(5), Shape: draw.PyramidGlyph{}},
	{Color: color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, Radius: vg.Points(4), Shape: draw.BoxGlyph{}},
}

// floorStyle is the glyph of the implementations of a backend without
// fencelock: the floor.
var floorStyle = draw.GlyphStyle{Color: color.Gray{Y: 0x70}, Radius: vg.Points(4.5), Shape: draw.CircleGlyph{}}

// rttStyle draws a backend's round trip across its latency rows.
var rttStyle = draw.LineStyle{
	Color:  color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	Width:  vg.Points(1.5),
	Dashes: []vg.Length{vg.Points(5), vg.Points(3)},
}

// separatorStyle draws the line between two backends' rows.
var separatorStyle = draw.LineStyle{Color: color.Gray{Y: 0xcc}, Width: vg.Points(0.5)}

// Chart writes an SVG chart of the report: the latencies (uncontended
// acquire+release, handoff p50 and p99) with each backend's round trip
// marked, and the 8-way grants/s, fencelock beside each anchor, on log
// scales (the floor and the servers are orders of magnitude apart). Each
// point is a median with its 95% confidence interval as a bar.
func (rep *Report) Chart(w io.Writer) error {
	var latency, grants []Row
	for _, r := range rep.Rows {
		switch {
		case r.Latency:
			latency = append(latency, r)
		case r.Label == measures[1].label:
			grants = append(grants, r)
		}
	}
	if len(latency)+len(grants) == 0 {
		return fmt.Errorf("benchreport: nothing to chart")
	}
	styles := map[string]draw.GlyphStyle{}
	var impls []string
	compared := 0 // impls given one of implStyles
	for _, b := range rep.Backends {
		for _, impl := range b.Impls {
			if _, ok := styles[impl]; ok {
				continue
			}
			styles[impl] = floorStyle
			if slices.Contains(b.Impls, Fencelock) {
				styles[impl] = implStyles[compared%len(implStyles)]
				compared++
			}
			impls = append(impls, impl)
		}
	}

	// Liberation Sans has the metrics of Arial and Helvetica, which the
	// SVG names as fallbacks (see fontFallbacks).
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

	latencyPlot, err := panel(latency, styles, "Latency, log scale: uncontended acquire+release, 8-way handoff p50 and p99\n(median and 95% CI of the rounds; dashed red: the backend's round trip)", true)
	if err != nil {
		return err
	}
	grantsPlot, err := panel(grants, styles, "8-way grants per second, log scale (higher is better)", false)
	if err != nil {
		return err
	}

	latencyHeight := panelMargins + rowHeight*vg.Length(len(latency))
	grantsHeight := panelMargins + rowHeight*vg.Length(max(len(grants), 2))
	canvas := vgsvg.New(chartWidth, latencyHeight+grantsHeight)
	dc := draw.New(canvas)
	plots := draw.Crop(dc, vg.Points(6), -legendWidth, 0, 0)
	latencyPlot.Draw(draw.Crop(plots, 0, 0, grantsHeight, 0))
	grantsPlot.Draw(draw.Crop(plots, 0, 0, 0, -latencyHeight-vg.Points(8)))

	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.YOffs = -vg.Points(30)
	legend.ThumbnailWidth = vg.Points(18)
	legend.Padding = vg.Points(3)
	for _, impl := range impls {
		legend.Add(ImplTitle(impl), glyphThumb(styles[impl]))
	}
	legend.Add("round trip (RTT)", lineThumb(rttStyle))
	legend.Draw(draw.Crop(dc, chartWidth-legendWidth+vg.Points(10), 0, 0, 0))

	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return err
	}
	_, err = io.WriteString(w, fontFallbacks(buf.String()))
	return err
}

// fontFallbacks lets a viewer without the Liberation fonts (which the
// SVG names by their family only) use a font with the same metrics.
func fontFallbacks(svg string) string {
	return strings.ReplaceAll(svg, "font-family:Liberation Sans;", "font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")
}

// panel plots rows as a horizontal dot plot, one line per row from the
// top, each implementation a glyph at its median with its confidence
// interval; with rtt, each backend's round trip as a dashed line across
// its rows.
//
// The x axes have no label: gonum/plot centres an axis label at the
// arithmetic middle of the axis range, far right on a log scale, and
// narrows the plot to make room for it.
func panel(rows []Row, styles map[string]draw.GlyphStyle, title string, rtt bool) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = decadeTicks{seconds: rtt}
	p.Y.Padding = 0
	y := func(i int) float64 { return float64(len(rows) - 1 - i) }
	labels := make([]string, len(rows))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, r := range rows {
		labels[len(rows)-1-i] = r.Backend.Title()
		if rtt {
			labels[len(rows)-1-i] += "  " + chartLabels[r.Label]
		}
		for j, s := range r.Stats {
			if s.Summary.Center <= 0 {
				continue // not on a log scale
			}
			offset := 0.0
			if len(r.Stats) > 1 {
				offset = 0.25 - 0.5*float64(j)/float64(len(r.Stats)-1)
			}
			pt := plotter.XYs{{X: s.Summary.Center, Y: y(i) + offset}}
			low, high := s.Summary.Lo, s.Summary.Hi
			if low <= 0 || low > s.Summary.Center || math.IsInf(low, 0) { // too few rounds for an interval
				low = s.Summary.Center
			}
			if high < s.Summary.Center || math.IsInf(high, 0) {
				high = s.Summary.Center
			}
			lo, hi = math.Min(lo, low), math.Max(hi, high)
			bars, err := plotter.NewXErrorBars(struct {
				plotter.XYs
				plotter.XErrors
			}{pt, plotter.XErrors{{Low: s.Summary.Center - low, High: high - s.Summary.Center}}})
			if err != nil {
				return nil, err
			}
			bars.LineStyle.Color = styles[s.Impl].Color
			bars.CapWidth = vg.Points(5)
			dots, err := plotter.NewScatter(pt)
			if err != nil {
				return nil, err
			}
			dots.GlyphStyle = styles[s.Impl]
			p.Add(bars, dots)
		}
	}
	if len(rows) == 0 {
		lo, hi = 1, 10
	}
	// The backends' round trips, across their rows.
	type span struct{ first, last int }
	spans := map[*Backend]*span{}
	var order []*Backend
	for i, r := range rows {
		if s, ok := spans[r.Backend]; ok {
			s.last = i
			continue
		}
		spans[r.Backend] = &span{i, i}
		order = append(order, r.Backend)
	}
	if rtt {
		for _, b := range order {
			if b.RTT == nil || b.RTT.Center <= 0 {
				continue
			}
			lo, hi = math.Min(lo, b.RTT.Center), math.Max(hi, b.RTT.Center)
			s := spans[b]
			line, err := plotter.NewLine(plotter.XYs{{X: b.RTT.Center, Y: y(s.first) + 0.45}, {X: b.RTT.Center, Y: y(s.last) - 0.45}})
			if err != nil {
				return nil, err
			}
			line.LineStyle = rttStyle
			p.Add(line)
		}
	}
	p.X.Min = math.Pow(10, math.Floor(math.Log10(lo)))
	p.X.Max = math.Pow(10, math.Ceil(math.Log10(hi)))
	for _, b := range order[1:] {
		at := y(spans[b].first) + 0.5
		line, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: at}, {X: p.X.Max, Y: at}})
		if err != nil {
			return nil, err
		}
		line.LineStyle = separatorStyle
		p.Add(line)
	}
	p.NominalY(labels...)
	p.Y.Min, p.Y.Max = -0.5, float64(len(rows))-0.5
	return p, nil
}

// chartLabels shorten the latency rows' labels.
var chartLabels = map[string]string{
	measures[0].label: "acquire+release",
	measures[2].label: "handoff p50",
	measures[3].label: "handoff p99",
}

// decadeTicks marks a log axis at each power of ten, labelled with an SI
// prefix (and "s" for seconds), with minor ticks at 2 to 9 times each.
type decadeTicks struct{ seconds bool }

// Ticks returns the ticks between min and max.
func (t decadeTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		decade := math.Pow(10, e)
		for m := 1.0; m < 10; m++ {
			v := m * decade
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			tick := plot.Tick{Value: v}
			if m == 1 {
				tick.Label = siLabel(e, t.seconds)
			}
			ticks = append(ticks, tick)
		}
	}
	return ticks
}

// siLabel names 10^e with an SI prefix: 1µs, 10µs, 100µs, 1ms...
func siLabel(e float64, seconds bool) string {
	prefixes := []string{"n", "µ", "m", "", "k", "M", "G"}
	exp := int(e)
	group := int(math.Floor(float64(exp)/3)) + 3
	if group < 0 || group >= len(prefixes) {
		return fmt.Sprintf("1e%d", exp)
	}
	label := fmt.Sprintf("%d%s", int(math.Pow(10, float64(exp-3*(group-3)))), prefixes[group])
	if seconds {
		label += "s"
	}
	return label
}

// glyphThumb draws a legend entry's glyph.
type glyphThumb draw.GlyphStyle

// Thumbnail draws the glyph at the centre of c.
func (g glyphThumb) Thumbnail(c *draw.Canvas) {
	c.DrawGlyph(draw.GlyphStyle(g), c.Center())
}

// lineThumb draws a legend entry's line.
type lineThumb draw.LineStyle

// Thumbnail draws the line across c.
func (l lineThumb) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(draw.LineStyle(l), c.Min.X, y, c.Max.X, y)
}
