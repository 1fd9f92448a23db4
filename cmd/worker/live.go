package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// liveView renders a status snapshot: redrawn in place on a terminal, a
// line per second elsewhere.
type liveView struct {
	w      io.Writer
	tty    bool
	lines  int
	notes  []string
	last   time.Time
	prevAt time.Time
	prev   int64
	rate   float64
	rows   int // contracts shown on a terminal
	// per-contract rates between consecutive draws
	seen   map[string]int64
	seenAt time.Time
	rates  map[string]float64
}

func newLiveView(w io.Writer) *liveView { return &liveView{w: w, tty: isTerminal(w), rows: 8} }

func (v *liveView) note(s string) {
	stamp := time.Now().Format("15:04:05.000")
	if v.tty {
		v.notes = append(v.notes, stamp+"  "+s)
		return
	}
	fmt.Fprintf(v.w, "%s  %s\n", stamp, s)
}

func bar(done, total int64, width int) string {
	if total <= 0 {
		return strings.Repeat("█", width)
	}
	n := int(int64(width) * done / total)
	return strings.Repeat("█", n) + strings.Repeat("░", width-n)
}

func (v *liveView) draw(s statusJSON, total int64, elapsed time.Duration) {
	now := time.Now()
	if v.seen != nil && now.Sub(v.seenAt) > 0 {
		v.rates = map[string]float64{}
		for _, p := range s.Partitions {
			v.rates[p.ContractID] = float64(p.Processed-v.seen[p.ContractID]) / now.Sub(v.seenAt).Seconds()
		}
	}
	v.seen, v.seenAt = map[string]int64{}, now
	for _, p := range s.Partitions {
		v.seen[p.ContractID] = p.Processed
	}
	if !v.prevAt.IsZero() && now.Sub(v.prevAt) >= 500*time.Millisecond {
		v.rate = float64(s.Totals.Processed-v.prev) / now.Sub(v.prevAt).Seconds()
		v.prev, v.prevAt = s.Totals.Processed, now
	} else if v.prevAt.IsZero() {
		v.prev, v.prevAt = s.Totals.Processed, now
	}
	if !v.tty {
		if now.Sub(v.last) >= time.Second {
			v.last = now
			fmt.Fprintf(v.w, "%6.1fs  %s %3d%%  %d/%d priced  %.0f records/s  workers:%s\n",
				elapsed.Seconds(), bar(s.Totals.Processed, total, 20), pct(s.Totals.Processed, total),
				s.Totals.Processed, total, v.rate, workerSummary(s))
		}
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%6.1fs  %s %3d%%  %d/%d records priced  %.0f records/s\n",
		elapsed.Seconds(), bar(s.Totals.Processed, total, 30), pct(s.Totals.Processed, total), s.Totals.Processed, total, v.rate)
	fmt.Fprintf(&b, "workers:%s   contracts by state: %v\n", workerSummary(s), s.Totals.ByState)
	// The busiest contracts, with their owners.
	parts := append([]partitionJSON(nil), s.Partitions...)
	// Held contracts first (what is being worked on now), then the backlog.
	rank := map[string]int{"active": 0, "caught_up": 1, "stale": 2, "backoff": 3, "quarantined": 4, "pending": 5, "done": 6}
	sort.SliceStable(parts, func(i, j int) bool {
		if ri, rj := rank[parts[i].State], rank[parts[j].State]; ri != rj {
			return ri < rj
		}
		return parts[i].Pending > parts[j].Pending
	})
	rows := v.rows
	if h := terminalRows(v.w); h > 0 {
		// Header lines, notes and the cursor line must fit as well.
		rows = max(0, min(rows, h-3-len(v.notes)))
	}
	for _, p := range parts[:min(rows, len(parts))] {
		owner := "-"
		if p.Owner != nil {
			owner = *p.Owner
		}
		fmt.Fprintf(&b, "  %-14s %s %-11s %-10s %7.0f/s %8d left\n", p.ContractID, bar(p.Processed, p.Processed+p.Pending, 16),
			p.State, owner, v.rates[p.ContractID], p.Pending)
	}
	for _, n := range v.notes {
		fmt.Fprintln(&b, n)
	}
	if v.lines > 0 {
		fmt.Fprintf(v.w, "\033[%dA", v.lines)
	}
	text := b.String()
	fmt.Fprint(v.w, strings.ReplaceAll(text, "\n", "\033[K\n"))
	v.lines = strings.Count(text, "\n")
}

func (v *liveView) finish() {}

func pct(a, b int64) int64 {
	if b == 0 {
		return 100
	}
	return 100 * a / b
}

func workerSummary(s statusJSON) string {
	var b strings.Builder
	for _, w := range s.Workers {
		fmt.Fprintf(&b, " %s=%d", w.Name, w.Held)
	}
	if len(s.Workers) == 0 {
		b.WriteString(" none")
	}
	return b.String()
}
