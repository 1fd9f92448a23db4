package text

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/internal/report"

	"github.com/batonhq/baton/internal/progress"
)

// Live renders a status snapshot: redrawn in place on a terminal, a
// line per second elsewhere. On a terminal every line is cut to the
// terminal's width, so nothing wraps and a redraw always overwrites exactly
// what the previous one drew, and the contract list is cut to its height
// with an "N more" line.
type Live struct {
	w      io.Writer
	tty    bool
	screen bool // redraw from the top of the screen (status --watch) rather than in place below earlier output
	lines  int
	notes  []string
	alert  string // shown above everything while set (e.g. database unreachable)
	last   time.Time
	prevAt time.Time
	prev   int64
	rate   float64
	rows   int // at most this many contracts are listed
	// per-contract rates between consecutive draws
	seen   map[string]int64
	seenAt time.Time
	rates  map[string]float64
	// size returns the terminal's width and height (0 when unknown).
	size func() (int, int)
}

// NewLive returns a live view drawn on w, in place when w is a terminal.
func NewLive(w io.Writer) *Live {
	return &Live{w: w, tty: progress.IsTerminal(w), rows: 8, size: func() (int, int) { return progress.TerminalSize(w) }}
}

// Note adds a line under the view (a terminal) or writes it with a time
// stamp (elsewhere).
func (v *Live) Note(s string) {
	stamp := time.Now().Format("15:04:05.000")
	if v.tty {
		v.notes = append(v.notes, stamp+"  "+s)
		return
	}
	fmt.Fprintf(v.w, "%s  %s\n", stamp, s)
}

// bar draws done/total as a bar of width cells; any input is safe.
func bar(done, total int64, width int) string {
	width = max(width, 0)
	n := width
	if total > 0 {
		done = min(max(done, 0), total)
		n = int(float64(width) * float64(done) / float64(total))
	}
	n = min(max(n, 0), width)
	return strings.Repeat("█", n) + strings.Repeat("░", width-n)
}

func stateRank(s string) int {
	for i, x := range report.StateOrder {
		if x == s {
			return i
		}
	}
	return len(report.StateOrder)
}

// byState formats the state counts in report.StateOrder: "active 3, done 10".
func byState(m map[string]int) string {
	var parts []string
	for _, s := range report.StateOrder {
		if m[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, m[s]))
		}
	}
	for s, n := range m { // states this binary does not know, if any
		if stateRank(s) == len(report.StateOrder) && n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Draw draws s, of which total records are to be priced, elapsed after
// the start.
func (v *Live) Draw(s report.Status, total int64, elapsed time.Duration) {
	now := time.Now()
	if v.seen != nil && now.Sub(v.seenAt) > 0 {
		v.rates = map[string]float64{}
		for _, p := range s.Partitions {
			if before, ok := v.seen[p.ContractID]; ok {
				v.rates[p.ContractID] = max(0, float64(p.Processed-before)/now.Sub(v.seenAt).Seconds())
			}
		}
	}
	v.seen, v.seenAt = map[string]int64{}, now
	for _, p := range s.Partitions {
		v.seen[p.ContractID] = p.Processed
	}
	if !v.prevAt.IsZero() && now.Sub(v.prevAt) >= 500*time.Millisecond {
		v.rate = max(0, float64(s.Totals.Processed-v.prev)/now.Sub(v.prevAt).Seconds())
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
			if s.Horizon != nil && s.Horizon.Warning {
				fmt.Fprintf(v.w, "        WARNING: %s\n", s.Horizon.Reason)
			}
		}
		return
	}
	width, height := v.size()
	if width <= 0 {
		width = 80
	}
	var lines []string
	if v.alert != "" {
		lines = append(lines, v.alert)
	}
	lines = append(lines,
		fmt.Sprintf("%6.1fs %s %3d%%  %d/%d priced  %.0f/s", elapsed.Seconds(), bar(s.Totals.Processed, total, 20),
			pct(s.Totals.Processed, total), s.Totals.Processed, total, v.rate),
		fmt.Sprintf("workers %d:%s", len(s.Workers), workerSummary(s)),
		"contracts: "+byState(s.Totals.ByState),
	)
	if h := s.Horizon; h != nil {
		if h.Warning {
			lines = append(lines, "WARNING: "+h.Reason)
		}
		lines = append(lines, horizonLine(h))
	}
	parts := append([]report.Contract(nil), s.Partitions...)
	sort.SliceStable(parts, func(i, j int) bool {
		if ri, rj := stateRank(parts[i].State), stateRank(parts[j].State); ri != rj {
			return ri < rj
		}
		return parts[i].Pending > parts[j].Pending
	})
	// Room for the contract rows: the terminal height less the lines
	// above, the notes, the "N more" line and the cursor's line.
	rows := v.rows
	if height > 0 {
		rows = height - len(lines) - 1 - len(v.notes) - 1
		if !v.screen {
			rows = min(rows, v.rows)
		}
	}
	// The contract section: a header, the rows that fit, and a last line
	// saying how many more there are when not all fit.
	if r := max(0, rows) - 1; r > 0 && len(parts) > 0 {
		shown := len(parts)
		if shown > r {
			shown = r - 1
		}
		cols := layout(width, parts[:shown])
		lines = append(lines, contractHeader(cols))
		for _, p := range parts[:shown] {
			lines = append(lines, contractLine(p, v.rates[p.ContractID], cols))
		}
		if more := len(parts) - shown; more > 0 {
			lines = append(lines, fmt.Sprintf("  … %d more contracts (worker status lists them all)", more))
		}
	}
	lines = append(lines, v.notes...)
	var b strings.Builder
	if v.screen {
		b.WriteString("\033[H")
	} else if v.lines > 0 {
		fmt.Fprintf(&b, "\033[%dA\r", v.lines)
	}
	for _, l := range lines {
		b.WriteString(Fit(l, width-1))
		b.WriteString("\033[K\n")
	}
	if v.screen {
		b.WriteString("\033[J")
	}
	fmt.Fprint(v.w, b.String())
	v.lines = len(lines)
}

// contract row layout: id, state, owner, bar, rate, records left.
const (
	colState = 11
	colOwner = 12
	colBar   = 10
	colRate  = 5 // then "/s"
	colLeft  = 8 // then " left"
)

// columns are the widths of the live view's two variable columns.
type columns struct{ id, owner int }

// layout sizes the id and owner columns for the contracts shown in a line
// of width-1 characters (the last column stays free so that no terminal
// wraps): ids take what they need and no more, the owner column grows
// into what is left (an owner with segments, "w1#a1b2 +3 seg", is long),
// and when room is short ids give way first, cut in the middle.
func layout(width int, parts []report.Contract) columns {
	avail := width - 1 - 2 - (colState + 1) - (colBar + 1) - (colRate + 2 + 1) - (colLeft + 5) - 1
	wantID, wantOwner := len("CONTRACT"), colOwner
	for _, p := range parts {
		wantID = max(wantID, utf8.RuneCountInString(p.ContractID))
		wantOwner = max(wantOwner, utf8.RuneCountInString(ownerText(p)))
	}
	c := columns{owner: colOwner, id: avail - colOwner - 1}
	if spare := c.id - wantID; spare > 0 {
		c.id = wantID
		c.owner = min(wantOwner, colOwner+spare)
	}
	c.id = max(8, c.id)
	return c
}

func contractHeader(c columns) string {
	return fmt.Sprintf("  %-*s %-*s %-*s %-*s %*s %*s", c.id, "CONTRACT", colState, "STATE",
		c.owner, "OWNER", colBar, "PROGRESS", colRate+2, "RATE", colLeft+5, "LEFT")
}

// ownerText is who holds a contract, with the segments held.
func ownerText(p report.Contract) string {
	switch {
	case p.Owner != nil && p.SegmentsHeld > 0:
		return fmt.Sprintf("%s +%d seg", *p.Owner, p.SegmentsHeld)
	case p.Owner != nil:
		return *p.Owner
	case p.SegmentsHeld > 0:
		return noun.Count(p.SegmentsHeld, "segment", "segments")
	}
	return "-"
}

func contractLine(p report.Contract, rate float64, c columns) string {
	return fmt.Sprintf("  %s %s %s %s %*.0f/s %*d left", padMiddle(p.ContractID, c.id), pad(p.State, colState),
		pad(ownerText(p), c.owner), bar(p.Processed, p.Processed+p.Pending, colBar), colRate, rate, colLeft, p.Pending)
}

// Fit cuts s to at most n characters (runes), ending a cut line with "…".
func Fit(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// FitMiddle cuts s to at most n characters (runes) by taking them out of
// its middle, marked "…": ids that share a long prefix (c-2024-…-0041,
// c-2024-…-0042) still differ by their ends. The end keeps the larger half.
func FitMiddle(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	head := (n - 1) / 2
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// pad fits s into exactly n characters.
func pad(s string, n int) string {
	s = Fit(s, n)
	return s + strings.Repeat(" ", max(0, n-utf8.RuneCountInString(s)))
}

// padMiddle fits s into exactly n characters, cutting its middle.
func padMiddle(s string, n int) string {
	s = FitMiddle(s, n)
	return s + strings.Repeat(" ", max(0, n-utf8.RuneCountInString(s)))
}

// horizonLine sums up what holds back vacuum in one line.
func horizonLine(h *horizon.View) string {
	oldest := "nothing holds back the xmin horizon"
	if len(h.Holders) > 0 {
		x := h.Holders[0]
		age := "age unknown"
		if x.AgeMS != nil {
			age = (time.Duration(*x.AgeMS) * time.Millisecond).Round(time.Second).String()
		}
		oldest = fmt.Sprintf("oldest transaction holding the horizon %s: %s", age, x.Describe())
	}
	return fmt.Sprintf("vacuum: %d dead row versions; %s", h.DeadRows, oldest)
}

func pct(a, b int64) int64 {
	if b <= 0 {
		return 100
	}
	return int64(100 * float64(min(max(a, 0), b)) / float64(b))
}

func workerSummary(s report.Status) string {
	var b strings.Builder
	for _, w := range s.Workers {
		fmt.Fprintf(&b, " %s=%d", w.Name, w.Held)
	}
	if len(s.Workers) == 0 {
		b.WriteString(" none")
	}
	return b.String()
}
