package main

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var escapes = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// The live view cannot panic, and never writes a line wider than the
// terminal, whatever the terminal's size and the data.
func TestLiveViewFitsAnyTerminalAndData(t *testing.T) {
	owner := "w1"
	long := strings.Repeat("y", 64)
	snapshots := map[string]statusJSON{
		"empty": {Totals: totalsJSON{ByState: map[string]int{}}},
		"odd numbers": {
			Partitions: []partitionJSON{
				{ContractID: long, State: "active", Owner: &owner, Processed: 500, Pending: -20},
				{ContractID: "c", State: "confirming", Processed: math.MaxInt64, Pending: math.MaxInt64},
				{ContractID: "d", State: "done", Processed: -5, Pending: 0},
			},
			Workers: []workerJSON{{Name: strings.Repeat("w", 100), Held: 3}},
			Totals:  totalsJSON{Partitions: 3, Processed: 1 << 62, Pending: -1, ByState: map[string]int{"active": 1, "done": 1, "weird": 1}},
		},
	}
	many := statusJSON{Totals: totalsJSON{ByState: map[string]int{}}}
	for i := range 500 {
		many.Partitions = append(many.Partitions, partitionJSON{ContractID: fmt.Sprintf("%s-%03d", long[:60], i), State: "pending", Pending: int64(i)})
		many.Totals.ByState["pending"]++
	}
	snapshots["many"] = many
	for name, s := range snapshots {
		for _, width := range []int{0, 1, 2, 5, 20, 40, 80, 81, 300} {
			for _, height := range []int{0, 1, 2, 3, 5, 24, 100} {
				for _, screen := range []bool{false, true} {
					var buf bytes.Buffer
					v := &liveView{w: &buf, tty: true, screen: screen, rows: 8, size: func() (int, int) { return width, height }}
					v.note("a note that is longer than a narrow terminal is wide")
					v.alert = "database unreachable, retrying"
					for _, total := range []int64{0, -3, s.Totals.Processed, 10} {
						v.draw(s, total, time.Second)
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
