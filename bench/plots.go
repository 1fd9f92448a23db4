package main

import (
	"fmt"
	"image/color"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
	color.RGBA{R: 140, G: 86, B: 75, A: 255},
	color.RGBA{R: 227, G: 119, B: 194, A: 255},
	color.RGBA{R: 127, G: 127, B: 127, A: 255},
}

// writePlots draws every plot the results allow, as PNG and SVG.
// drawPlot draws one plot into dir as PNG and SVG. The plotting library
// panics on values it cannot draw (a zero on a log scale): that plot is
// then missing and reported, and the report is still written.
func drawPlot(r *results, dir, name string, fn func(*results) (*plot.Plot, error), width vg.Length) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%s: %v", name, v)
		}
	}()
	p, err := fn(r)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if p == nil {
		return nil
	}
	for _, ext := range []string{"png", "svg"} {
		if err := p.Save(width, 11*vg.Centimeter, filepath.Join(dir, name+"."+ext)); err != nil {
			return fmt.Errorf("saving %s.%s: %w", name, ext, err)
		}
	}
	return nil
}

func writePlots(r *results, dir string) error {
	type job struct {
		name  string
		fn    func(*results) (*plot.Plot, error)
		width vg.Length
	}
	var errs []error
	for _, j := range []job{
		{"throughput", throughputPlot, 18 * vg.Centimeter},
		{"failover", failoverPlot, 26 * vg.Centimeter},
		{"coordination_statements", coordStatementsPlot, 18 * vg.Centimeter},
		{"coordination_cpu", coordCPUPlot, 18 * vg.Centimeter},
		{"heartbeat_latency", heartbeatPlot, 18 * vg.Centimeter},
	} {
		if err := drawPlot(r, dir, j.name, j.fn, j.width); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}

func lineWith(pts plotter.XYs, c color.Color, dashed bool) (*plotter.Line, *plotter.Scatter, error) {
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return nil, nil, err
	}
	l.Color, s.Color = c, c
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	return l, s, nil
}

func hline(y, x0, x1 float64, c color.Color, dashes []vg.Length) (*plotter.Line, error) {
	l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
	if err != nil {
		return nil, err
	}
	l.Color, l.Dashes, l.Width = c, dashes, vg.Points(1.5)
	return l, nil
}

// throughputPlot: records/s against worker processes, baton and the peers,
// with the single-statement ceiling and COPY as horizontal lines.
func throughputPlot(r *results) (*plot.Plot, error) {
	t := r.Throughput
	if t == nil || len(t.Runs) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("End-to-end pricing throughput (%d records)", t.Dataset.Records)
	p.X.Label.Text = "worker processes"
	p.Y.Label.Text = "records/s"
	p.Legend.Top = true
	series := map[string]plotter.XYs{}
	counts := map[int]bool{}
	add := func(runs []runResult) {
		seen := map[string]bool{}
		for _, run := range runs {
			key := fmt.Sprintf("%s/%d", run.Design, run.Workers)
			if seen[key] {
				continue
			}
			seen[key] = true
			var m runResult
			if run.Design == "baton" {
				m, _ = t.median(run.Design, run.Workers)
			} else {
				m = run
			}
			series[run.Design] = append(series[run.Design], plotter.XY{X: float64(run.Workers), Y: m.PerSec})
			counts[run.Workers] = true
		}
	}
	add(t.Runs)
	if r.Peers != nil {
		add(r.Peers.Runs)
	}
	xmax := 1.0
	for c := range counts {
		xmax = max(xmax, float64(c))
	}
	names := []string{"baton", "skiplocked", "advisory"}
	for i, name := range names {
		pts := series[name]
		if len(pts) == 0 {
			continue
		}
		sort.Slice(pts, func(a, b int) bool { return pts[a].X < pts[b].X })
		l, s, err := lineWith(pts, palette[i], false)
		if err != nil {
			return nil, err
		}
		p.Add(l, s)
		p.Legend.Add(name+" (worker processes)", l, s)
	}
	if c, ok := t.ceiling(); ok {
		l, err := hline(c.PerSec, 0.8, xmax+0.2, palette[3], []vg.Length{vg.Points(6), vg.Points(3)})
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("single SQL statement (%s)", c.Variant), l)
	}
	if c, ok := t.copyRate(); ok {
		l, err := hline(c.PerSec, 0.8, xmax+0.2, palette[7], []vg.Length{vg.Points(2), vg.Points(2)})
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add("COPY of the output rows", l)
	}
	ymax := 0.0
	for _, pts := range series {
		for _, pt := range pts {
			ymax = max(ymax, pt.Y)
		}
	}
	if c, ok := t.ceiling(); ok {
		ymax = max(ymax, c.PerSec)
	}
	if c, ok := t.copyRate(); ok {
		ymax = max(ymax, c.PerSec)
	}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0.8, xmax+0.2, 0, ymax*1.45
	p.Y.Tick.Marker = thousands{}
	p.X.Tick.Marker = integers{}
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p, nil
}

// thousands labels ticks as 50k, 100k, ….
type thousands struct{}

func (thousands) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = fmt.Sprintf("%.0fk", ts[i].Value/1000)
		}
	}
	return ts
}

// integers puts a labelled tick on every whole number.
type integers struct{}

func (integers) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for v := math.Ceil(min); v <= max; v++ {
		ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%.0f", v)})
	}
	return ts
}

// failoverPlot: time from the signal to the first batch committed by
// another worker, per design and setting, log scale; runs that never
// resumed are drawn at the give-up time with a cross.
func failoverPlot(r *results) (*plot.Plot, error) {
	type cat struct {
		name   string
		vals   []float64
		gaveUp []float64
		bound  float64
	}
	var cats []cat
	if r.Failover != nil {
		for _, s := range r.Failover.Series {
			c := cat{name: fmt.Sprintf("baton %s\n%s/%s", s.Kind, s.Timing.Heartbeat, s.Timing.StaleAfter)}
			if s.Kind == "crash" {
				c.bound = s.BoundS
			}
			for _, ev := range s.Events {
				if ev.FirstS >= 0 {
					c.vals = append(c.vals, ev.FirstS)
				} else {
					c.gaveUp = append(c.gaveUp, parseDur(s.Timing.StaleAfter).Seconds()+30)
				}
			}
			cats = append(cats, c)
		}
	}
	if r.Peers != nil {
		for _, f := range r.Peers.Faults {
			c := cat{name: fmt.Sprintf("%s\n%s", strings.Replace(f.Design, "+", "\n+", 1), f.Signal)}
			if f.FirstS >= 0 {
				c.vals = append(c.vals, f.FirstS)
			} else {
				c.gaveUp = append(c.gaveUp, f.GiveUpS)
			}
			cats = append(cats, c)
		}
	}
	if len(cats) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Kill/stop → first batch committed by another worker (database commit times)"
	p.Y.Label.Text = "seconds (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	rng := rand.New(rand.NewPCG(1, 2))
	var names []string
	var resumed, never plotter.XYs
	for i, c := range cats {
		names = append(names, c.name)
		for _, v := range c.vals {
			resumed = append(resumed, plotter.XY{X: float64(i) + (rng.Float64()-0.5)*0.3, Y: math.Max(v, 0.01)})
		}
		for _, v := range c.gaveUp {
			never = append(never, plotter.XY{X: float64(i), Y: v})
		}
		if c.bound > 0 {
			l, err := hline(c.bound, float64(i)-0.4, float64(i)+0.4, palette[3], nil)
			if err != nil {
				return nil, err
			}
			p.Add(l)
			if i == 0 || cats[i-1].bound == 0 {
				p.Legend.Add("bound: stale-after + confirm × heartbeat + poll", l)
			}
		}
	}
	if len(resumed) > 0 {
		s, err := plotter.NewScatter(resumed)
		if err != nil {
			return nil, err
		}
		s.Color = palette[0]
		s.Shape = draw.CircleGlyph{}
		p.Add(s)
		p.Legend.Add("resumed", s)
	}
	if len(never) > 0 {
		s, err := plotter.NewScatter(never)
		if err != nil {
			return nil, err
		}
		s.Color = palette[3]
		s.Shape = draw.CrossGlyph{}
		s.Radius = vg.Points(5)
		p.Add(s)
		p.Legend.Add("did not resume (drawn at the give-up)", s)
	}
	top := 1.0
	for _, c := range cats {
		for _, v := range append(append([]float64(nil), c.vals...), c.gaveUp...) {
			top = max(top, v)
		}
		top = max(top, c.bound)
	}
	p.Y.Max = top * 8
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	p.X.Tick.Label.Rotation = 0
	p.X.Tick.Label.Font.Size = vg.Points(6.5)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p, nil
}

func coordSeries(r *results, value func(coordCell) float64, ylabel, title string) (*plot.Plot, error) {
	c := r.Coord
	if c == nil || len(c.Cells) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "simulated workers (log scale)"
	p.Y.Label.Text = ylabel
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	type key struct {
		parts int
		state string
	}
	groups := map[key]plotter.XYs{}
	var keys []key
	for _, cell := range c.Cells {
		k := key{cell.Partitions, cell.State}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], plotter.XY{X: float64(cell.Workers), Y: math.Max(value(cell), 1e-3)})
	}
	for i, k := range keys {
		l, s, err := lineWith(groups[k], palette[i%len(palette)], k.state == "idle")
		if err != nil {
			return nil, err
		}
		p.Add(l, s)
		p.Legend.Add(fmt.Sprintf("%s, %d partitions", k.state, k.parts), l, s)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	return p, nil
}

func coordStatementsPlot(r *results) (*plot.Plot, error) {
	return coordSeries(r, func(c coordCell) float64 { return c.StmtPerSec }, "statements/s (log scale)",
		"Coordination statements per second (heartbeat, claim poll, fair share)")
}

func coordCPUPlot(r *results) (*plot.Plot, error) {
	if r.Coord == nil || len(r.Coord.Cells) == 0 || r.Coord.Cells[0].CPU.DB < 0 {
		return nil, nil
	}
	return coordSeries(r, func(c coordCell) float64 { return c.DBCores }, "database CPU, cores (log scale)",
		"Database CPU spent on coordination")
}

func heartbeatPlot(r *results) (*plot.Plot, error) {
	if r.Coord == nil || len(r.Coord.Held) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Heartbeat statement latency vs partitions held (one statement per beat)"
	p.X.Label.Text = "partitions held by the worker (log scale)"
	p.Y.Label.Text = "ms (log scale)"
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	var p50, p99, server plotter.XYs
	for _, h := range r.Coord.Held {
		x := float64(h.Held)
		p50 = append(p50, plotter.XY{X: x, Y: h.Latency.P50})
		p99 = append(p99, plotter.XY{X: x, Y: h.Latency.P99})
		if h.ServerMean > 0 {
			server = append(server, plotter.XY{X: x, Y: h.ServerMean})
		}
	}
	for i, s := range []struct {
		name string
		pts  plotter.XYs
	}{{"client p50", p50}, {"client p99", p99}, {"server mean (pg_stat_statements)", server}} {
		if len(s.pts) == 0 {
			continue
		}
		l, sc, err := lineWith(s.pts, palette[i], i == 2)
		if err != nil {
			return nil, err
		}
		p.Add(l, sc)
		p.Legend.Add(s.name, l, sc)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	return p, nil
}
