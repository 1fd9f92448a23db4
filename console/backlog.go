package console

import (
	"context"
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/partition"
)

// chartSpan is how far back the overview's backlog chart goes.
const chartSpan = time.Hour

// backlogView is the overview's backlog section: the kind's figures
// (package backlog; the console only reads, the publishing workers store
// the samples) and the samples of the last hour.
type backlogView struct {
	backlog.Figures
	History []backlog.Point `json:"history"`
}

// Chart draws History as an SVG line of pending items over the last hour
// (numbers only: nothing from the database is written as text).
func (b *backlogView) Chart() template.HTML {
	const w, h = 600.0, 120.0
	if len(b.History) == 0 {
		return ""
	}
	end := b.At
	var top int64 = 1
	for _, p := range b.History {
		top = max(top, p.PendingItems)
	}
	var pts strings.Builder
	for _, p := range b.History {
		x := w * (1 - float64(end.Sub(p.At))/float64(chartSpan))
		y := h - h*float64(p.PendingItems)/float64(top)
		fmt.Fprintf(&pts, "%.1f,%.1f ", max(x, 0), y)
	}
	return template.HTML(fmt.Sprintf(`<svg class="chart" id="backlog-chart" viewBox="0 0 %.0f %.0f" preserveAspectRatio="none" role="img" aria-label="pending items over the last hour, up to %d"><polyline fill="none" stroke="currentColor" stroke-width="2" vector-effect="non-scaling-stroke" points="%s"/></svg>`,
		w, h, top, strings.TrimSpace(pts.String())))
}

// readBacklog reads the kind's backlog figures and the last hour of its
// samples, and sets each part's ETA.
func (s *source) readBacklog(ctx context.Context, parts []part) (*backlogView, error) {
	r, err := backlog.New(s.db, backlog.Config{Schema: s.cfg.Schema, DrainTarget: s.cfg.DrainTarget})
	if err != nil {
		return nil, err
	}
	figs, err := r.Read(ctx)
	if err != nil {
		return nil, err
	}
	v := &backlogView{Figures: backlog.Figures{Kind: s.cfg.Kind, At: s.cfg.Clock.Now(), Drains: true,
		DrainTarget: r.Config().DrainTarget}}
	for _, f := range figs {
		if f.Kind == s.cfg.Kind {
			v.Figures = f
		}
	}
	if v.History, err = r.History(ctx, s.cfg.Kind, chartSpan); err != nil {
		return nil, err
	}
	for i := range parts {
		p := &parts[i]
		if p.State == partition.StateQuarantined || p.State == StateInconsistent {
			continue
		}
		held := p.SegmentsOwned
		if p.OwnerInstance != "" {
			held++
		}
		if eta, ok := v.ETA(p.Pending, held); ok {
			ms := eta.Milliseconds()
			p.ETAMS = &ms
		}
	}
	return v, nil
}
