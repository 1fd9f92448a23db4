package text

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/report"
)

var escapes = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// The live view cannot panic, and never writes a line wider than the
// terminal, whatever the terminal's size and the data.
func TestLiveViewFitsAnyTerminalAndData(t *testing.T) {
	owner := "w1"
	long := strings.Repeat("y", 64)
	snapshots := map[string]report.Status{
		"empty": {Totals: report.Totals{ByState: map[string]int{}}},
		"odd numbers": {
			Partitions: []report.Contract{
				{ContractID: long, State: "active", Owner: &owner, Processed: 500, Pending: -20},
				{ContractID: "c", State: "confirming", Processed: math.MaxInt64, Pending: math.MaxInt64},
				{ContractID: "d", State: "done", Processed: -5, Pending: 0},
			},
			Workers: []report.Worker{{Name: strings.Repeat("w", 100), Held: 3}},
			Totals:  report.Totals{Partitions: 3, Processed: 1 << 62, Pending: -1, ByState: map[string]int{"active": 1, "done": 1, "weird": 1}},
		},
	}
	many := report.Status{Totals: report.Totals{ByState: map[string]int{}}}
	for i := range 500 {
		many.Partitions = append(many.Partitions, report.Contract{ContractID: fmt.Sprintf("%s-%03d", long[:60], i), State: "pending", Pending: int64(i)})
		many.Totals.ByState["pending"]++
	}
	snapshots["many"] = many
	for name, s := range snapshots {
		for _, width := range []int{0, 1, 2, 5, 20, 40, 80, 81, 300} {
			for _, height := range []int{0, 1, 2, 3, 5, 24, 100} {
				for _, screen := range []bool{false, true} {
					var buf bytes.Buffer
					v := &Live{w: &buf, tty: true, screen: screen, rows: 8, size: func() (int, int) { return width, height }}
					v.Note("a note that is longer than a narrow terminal is wide")
					v.alert = "database unreachable, retrying"
					for _, total := range []int64{0, -3, s.Totals.Processed, 10} {
						v.Draw(s, total, time.Second)
					}
					limit := width - 1
					if width <= 0 {
						limit = 79
					}
					for _, line := range strings.Split(escapes.ReplaceAllString(buf.String(), ""), "\n") {
						line = strings.TrimPrefix(line, "\r")
						if n := utf8.RuneCountInString(line); n > max(limit, 0) {
							t.Fatalf("%s at %dx%d (screen %v): line of %d characters: %q", name, width, height, screen, n, line)
						}
					}
					// With room for the header lines and the note, the
					// view leaves the last line free so nothing scrolls.
					if height >= 10 && v.lines > height-1 {
						t.Fatalf("%s at %dx%d: %d lines drawn", name, width, height, v.lines)
					}
				}
			}
		}
	}
}

// Ids that share a long prefix are cut in the middle, so that each row
// still shows the end that tells them apart.
func TestLiveViewCutsIdsInTheMiddle(t *testing.T) {
	prefix := strings.Repeat("W", 60)
	s := report.Status{Totals: report.Totals{ByState: map[string]int{"pending": 3}}}
	for _, n := range []int{41, 42, 43} {
		s.Partitions = append(s.Partitions, report.Contract{ContractID: fmt.Sprintf("%s%04d", prefix, n), State: "pending", Pending: int64(n)})
	}
	var buf bytes.Buffer
	v := &Live{w: &buf, tty: true, screen: true, rows: 8, size: func() (int, int) { return 80, 24 }}
	v.Draw(s, 10, time.Second)
	ids := map[string]bool{}
	for _, line := range strings.Split(escapes.ReplaceAllString(buf.String(), ""), "\n") {
		if !strings.HasPrefix(line, "  WWW") {
			continue
		}
		if n := utf8.RuneCountInString(line); n > 79 {
			t.Fatalf("line of %d characters on an 80-column terminal: %q", n, line)
		}
		id := strings.Fields(line)[0]
		if !strings.Contains(id, "…") || !strings.HasPrefix(id, "WWW") {
			t.Fatalf("id cell %q: want the start, \"…\" and the end", id)
		}
		ids[id] = true
	}
	for _, n := range []int{41, 42, 43} {
		found := false
		for id := range ids {
			found = found || strings.HasSuffix(id, fmt.Sprintf("%04d", n))
		}
		if !found {
			t.Errorf("no id cell ends with %04d: %v", n, ids)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("%d distinct id cells for 3 contracts: %v", len(ids), ids)
	}
}

func TestFitMiddle(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abcdef", 10, "abcdef"},
		{"abcdef", 6, "abcdef"},
		{"abcdefghijklmnop", 7, "abc…nop"},
		{"abcdefghijklmnop", 8, "abc…mnop"},
		{"abcdef", 2, "…f"},
		{"abcdef", 1, "…"},
		{"abcdef", 0, ""},
		{"äöüßéèêëç", 5, "äö…ëç"},
		{strings.Repeat("W", 60) + "0042", 15, "WWWWWWW…WWW0042"},
	} {
		got := FitMiddle(c.s, c.n)
		if got != c.want {
			t.Errorf("FitMiddle(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
		if n := utf8.RuneCountInString(got); n > max(c.n, 0) {
			t.Errorf("FitMiddle(%q, %d): %d characters", c.s, c.n, n)
		}
		if p := padMiddle(c.s, c.n); c.n > 0 && utf8.RuneCountInString(p) != c.n {
			t.Errorf("padMiddle(%q, %d) = %q: want exactly %d characters", c.s, c.n, p, c.n)
		}
	}
}

// A contract's segments held by workers show in the owner column: beside
// its own row's owner, or alone when nobody holds its own row.
func TestLiveViewShowsSegmentsHeld(t *testing.T) {
	w := "w1"
	for _, tc := range []struct {
		p    report.Contract
		want string
	}{
		{report.Contract{ContractID: "c", State: "active", Owner: &w, Segments: 3, SegmentsHeld: 2}, "w1 +2 seg"},
		{report.Contract{ContractID: "c", State: "active", Segments: 3, SegmentsHeld: 1}, "1 segment "},
		{report.Contract{ContractID: "c", State: "pending", Segments: 3}, " - "},
	} {
		if got := contractLine(tc.p, 0, layout(100, []report.Contract{tc.p})); !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q does not show %q", tc.p, got, tc.want)
		}
	}
}

// At 160 columns short ids are not padded out to the terminal's width
// while a long owner is cut; at 80 a long id gives way first.
func TestLiveViewLayoutGivesRoomWhereItIsNeeded(t *testing.T) {
	owner := "pricer-eu-west-1a#7f3c9e2b"
	parts := []report.Contract{
		{ContractID: "c-000042", State: "active", Owner: &owner, SegmentsHeld: 3, Processed: 5, Pending: 5},
		{ContractID: "c-000043", State: "pending", Processed: 0, Pending: 10},
	}
	wide := layout(160, parts)
	line := contractLine(parts[0], 1234, wide)
	if !strings.Contains(line, owner+" +3 seg") || strings.Contains(line, "c-000042  "+strings.Repeat(" ", 20)) {
		t.Errorf("at 160 columns: %q (columns %+v): want the whole owner and no padded id", line, wide)
	}
	if n := utf8.RuneCountInString(line); n > 159 {
		t.Errorf("at 160 columns the line has %d characters", n)
	}
	long := []report.Contract{{ContractID: strings.Repeat("x", 70) + "-0042", State: "active", Owner: &owner}}
	narrow := layout(80, long)
	line = contractLine(long[0], 0, narrow)
	if n := utf8.RuneCountInString(line); n > 79 || !strings.Contains(line, "-0042") || narrow.owner != colOwner {
		t.Errorf("at 80 columns: %q (%d characters, columns %+v): want the id's end kept within 79 and the owner at its width", line, n, narrow)
	}
}

// On a terminal the live view shows the warning and the horizon line.
func TestHorizonLiveViewShowsWarning(t *testing.T) {
	age := int64(720000)
	s := report.Status{Totals: report.Totals{ByState: map[string]int{}}, Horizon: &horizon.View{
		Warning: true, Reason: "a transaction open for 12m0s holds back the xmin horizon", DeadRows: 42,
		Holders: []horizon.ViewHolder{{AgeMS: &age}},
	}}
	s.Horizon.Holders[0].PID, s.Horizon.Holders[0].Kind = 77, "session"
	var buf bytes.Buffer
	v := &Live{w: &buf, tty: true, screen: true, rows: 8, size: func() (int, int) { return 200, 24 }}
	v.Draw(s, 0, time.Second)
	out := escapes.ReplaceAllString(buf.String(), "")
	if !strings.Contains(out, "WARNING: a transaction open for 12m0s") || !strings.Contains(out, "vacuum: 42 dead row versions; oldest transaction holding the horizon 12m0s: pid 77") {
		t.Fatalf("live view:\n%s", out)
	}
}
