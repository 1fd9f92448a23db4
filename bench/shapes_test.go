package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
)

func TestShapesConfig(t *testing.T) {
	c, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(c.scenarios, "shapes") {
		t.Fatalf("shapes runs by default: %v", c.scenarios)
	}
	for _, tc := range []struct {
		args []string
		want []int64
	}{
		{[]string{"shapes"}, []int64{1_000_000}},
		{[]string{"-shapes-5m", "shapes"}, []int64{1_000_000, 5_000_000}},
		{[]string{"-quick", "shapes"}, []int64{100_000}},
		{[]string{"-quick", "-shapes-records", "200000", "shapes"}, []int64{200_000}},
		{[]string{"-shapes-records", "5000000", "-shapes-5m", "shapes"}, []int64{5_000_000}},
	} {
		c, err := parseConfig(tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := c.shapes.sizes(); !slices.Equal(got, tc.want) || !c.runs("shapes") {
			t.Fatalf("%v: sizes %v, want %v", tc.args, got, tc.want)
		}
	}
	if _, err := parseConfig([]string{"-shapes-records", "0", "shapes"}); err == nil {
		t.Fatal("-shapes-records 0 accepted")
	}
}

// shapeFixture is a row with baton at perSec and a ceiling at ceil whose
// output equals baton's unless differs.
func shapeFixture(label, shape string, perSec, ceil float64, differs bool) shapeRow {
	digest := "d"
	if differs {
		digest = "other"
	}
	return shapeRow{Label: label, Shape: shape, Contracts: 1000, PerContract: 1000, Records: 1_000_000, Largest: 1000,
		Run:      &runResult{Design: "baton", Workers: 2, Records: 1_000_000, PerSec: perSec, Seconds: 1e6 / perSec, Verified: true, Digest: "d"},
		Ceilings: []ceilingResult{{Variant: "telescoped", PerSec: ceil, Digest: digest, Matches: !differs}}}
}

func TestShapeGoalsAndReport(t *testing.T) {
	s := &shapesResult{Workers: 2, Seed: 1, Rows: []shapeRow{
		shapeFixture("uniform", "uniform", 400_000, 200_000, false),                                // 2.0: met
		shapeFixture("zipf", "zipf:1.1", 240_000, 200_000, false),                                  // 1.2: not met
		shapeFixture("hot fast", "hot:0.5", 380_000, 200_000, false),                               // 1.9, 0.95 of uniform: met
		shapeFixture("hot slow", "hot:0.9", 350_000, 200_000, false),                               // 1.75 but 0.875 of uniform: not met
		shapeFixture("differs", "uniform", 400_000, 200_000, true),                                 // no ceiling: unknown
		{Label: "failed", Shape: "uniform", Records: 1_000_000, Error: "worker w1: exit status 1"}, // no run
	}}
	want := []struct {
		met, known bool
		hot        float64
	}{{true, true, 0}, {false, true, 0}, {true, true, 0.95}, {false, true, 0.875}, {false, false, 0}, {false, false, 0}}
	for i, row := range s.Rows {
		met, known, hot := s.goals(row)
		if met != want[i].met || known != want[i].known || math.Abs(hot-want[i].hot) > 1e-9 {
			t.Errorf("%s: met %v known %v hot %.3f, want %+v", row.Label, met, known, hot, want[i])
		}
	}
	// A hot row without its uniform row has no verdict.
	lone := &shapesResult{Rows: []shapeRow{shapeFixture("hot", "hot:0.5", 400_000, 200_000, false)}}
	if _, known, _ := lone.goals(lone.Rows[0]); known {
		t.Error("a hot row without a uniform row got a verdict")
	}

	var b strings.Builder
	shapesSection(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, &results{Shapes: s})
	out := b.String()
	for _, line := range []string{
		"| uniform | 1,000,000 | 1,000 | 400000 | 200000 | 2.00 |  | met |",
		"| zipf | 1,000,000 | 1,000 | 240000 | 200000 | 1.20 |  | **not met** |",
		"| hot fast | 1,000,000 | 1,000 | 380000 | 200000 | 1.90 | 0.95 | met |",
		"| hot slow | 1,000,000 | 1,000 | 350000 | 200000 | 1.75 | 0.88 | **not met** |",
		"| differs | 1,000,000 | 1,000 | 400000 | 200000 (output differs) | — |  | — |",
		"| failed | 1,000,000 | 0 | — |",
		"- failed at 1,000,000 records failed: worker w1: exit status 1",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("report lacks %q:\n%s", line, out)
		}
	}
}

func TestBusiestKinds(t *testing.T) {
	st := []stmtKind{{Kind: "write priced", TotalMs: 60}, {Kind: "commit", TotalMs: 30}, {Kind: "fence", TotalMs: 10}}
	if got := busiestKinds(st, 2); got != "write priced 60 %, commit 30 %" {
		t.Fatalf("got %q", got)
	}
	if got := busiestKinds(nil, 2); got != "n/a" {
		t.Fatalf("no statements: %q", got)
	}
}

// lastContract finds the contract priced last, its span and the time it
// was alone, from priced_at.
func TestLastContract(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	insert := func(contract string, seconds ...int) {
		t.Helper()
		for i, s := range seconds {
			if _, err := db.ExecContext(ctx, `INSERT INTO baton.priced (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, priced_at)
				VALUES (?, ?, 'r', 1, 0, 1, 1, 'w', timestamptz '2026-01-01 00:00:00+00' + make_interval(secs => ?))`, contract, i+1, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert("a", 0, 5, 10)
	insert("b", 0, 3)
	insert("c", 1, 6, 12)
	id, span, alone, err := lastContract(ctx, db)
	if err != nil || id != "c" || span != 11 || alone != 2 {
		t.Fatalf("got %q span %v alone %v (%v), want c, 11, 2", id, span, alone, err)
	}
	// A contract started after every other finished is alone all along.
	insert("d", 20, 25)
	if id, span, alone, err = lastContract(ctx, db); err != nil || id != "d" || span != 5 || alone != 5 {
		t.Fatalf("got %q span %v alone %v (%v), want d, 5, 5", id, span, alone, err)
	}
	if _, err := db.ExecContext(ctx, `TRUNCATE baton.priced_rows`); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := lastContract(ctx, db); err == nil {
		t.Fatal("nothing priced: no error")
	}
}

func TestShapesOnlySelectsRows(t *testing.T) {
	all := shapesConfig{}
	some := shapesConfig{only: "1, 3"}
	for n := 1; n <= len(shapeSpecs); n++ {
		if !all.includes(n) {
			t.Errorf("row %d left out with no -shapes-only", n)
		}
		if want := n == 1 || n == 3; some.includes(n) != want {
			t.Errorf("-shapes-only 1,3: row %d included %v, want %v", n, some.includes(n), want)
		}
	}
}
