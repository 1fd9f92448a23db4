package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestVersionsConfig(t *testing.T) {
	c, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(c.scenarios, "versions") {
		t.Fatalf("versions runs by default: %v", c.scenarios)
	}
	for _, tc := range []struct {
		args           []string
		majors         []int
		records, kills int
	}{
		{[]string{"versions"}, []int{15, 16, 17, 18}, 200_000, 10},
		{[]string{"-quick", "versions"}, []int{15, 16, 17, 18}, 20_000, 3},
		{[]string{"-quick", "-versions", "15,17", "-versions-kills", "5", "versions"}, []int{15, 17}, 20_000, 5},
		{[]string{"-versions-shapes-records", "50000", "versions"}, []int{15, 16, 17, 18}, 50_000, 10},
	} {
		c, err := parseConfig(tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		v := c.versions
		if !slices.Equal([]int(v.majors), tc.majors) || v.shapesRecords.v != tc.records || v.kills.v != tc.kills || !c.runs("versions") {
			t.Fatalf("%v: majors %v, %d records, %d kills; want %v, %d, %d", tc.args, v.majors, v.shapesRecords.v, v.kills.v, tc.majors, tc.records, tc.kills)
		}
	}
	for _, bad := range [][]string{{"-versions", "15,15", "versions"}, {"-versions", "9", "versions"}, {"-versions-kills", "0", "versions"}} {
		if _, err := parseConfig(bad); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
}

// versionFixture is a major's run with one throughput figure per shape
// (0: that shape failed), a database CPU of cpuUS µs per record, a COPY
// set-up of setupUS µs and a takeover p50 of takeoverMS.
func versionFixture(major int, perSec []float64, cpuUS, setupUS, takeoverMS float64) versionRun {
	v := versionRun{Major: major, Server: "PostgreSQL test", Shapes: &shapesResult{Workers: 2},
		Copy:     &copySetup{Transactions: 100, Rows: copySetupRows, InsertOneUS: 100, CopyOneUS: 100 + setupUS, CopyManyUS: 100 + setupUS + 999*2},
		Takeover: &failoverSeries{First: dist{N: 3, P50: takeoverMS, P90: takeoverMS, Max: takeoverMS}, All: dist{N: 3, P50: takeoverMS}}}
	for i, p := range perSec {
		row := shapeFixture([]string{"a", "b", "c"}[i], "uniform", max(p, 1), 100_000, false)
		row.Run.Verified = p > 0
		row.Run.CPU.DB = cpuUS * float64(row.Records) / 1e6
		row.Run.Statements = []stmtKind{{Kind: "write priced", Calls: row.Records / 1000, TotalMs: float64(row.Records) / 100}}
		v.Shapes.Rows = append(v.Shapes.Rows, row)
	}
	return v
}

func TestVersionsReport(t *testing.T) {
	r := &results{Versions: &versionsResult{ShapesRecords: 1_000_000, Kills: 3, Workers: 3, Batch: 100, Runs: []versionRun{
		versionFixture(15, []float64{200_000, 100_000, 300_000}, 10, 1000, 2000),
		{Major: 16, Missing: "PostgreSQL 16 not installed"},
		versionFixture(17, []float64{400_000, 200_000, 0}, 5, 500, 2200),
	}}}
	var b strings.Builder
	versionsSection(func(f string, a ...any) { b.WriteString(fmt.Sprintf(f, a...)) }, r)
	out := b.String()
	for _, want := range []string{
		"| 16 | not installed: PostgreSQL 16 not installed |",
		"| shape | 15 | 17 |",
		"| a | 200000 | 400000 (2.00×) |",
		"| c | 300000 | — |",
		// Shape c failed on 17: the means are over a and b only.
		"| geometric mean over the shapes measured on every major | 141421 | 282843 (2.00×) |",
		"| **COPY set-up** (COPY of 1 row − INSERT of 1 row) | 1000 | 500 (0.50×) |",
		"| each further row of a COPY | 2.00 | 2.00 (1.00×) |",
		"| first batch p50 | 2000 | 2200 (1.10×) |",
		"- 17: baton's records/s 2.00× over the shapes; database CPU per record 0.50× (5.0 against 10.0 µs); the COPY set-up 0.50× (500 against 1000 µs",
		// One write per 1,000 records at 500 µs less: 0.5 µs of the 5 µs.
		"accounts for -0.50 µs of the -5.00 µs per record",
		"the takeover p50 1.10× (2200 against 2000 ms)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the section lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "- 15:") {
		t.Errorf("the baseline is compared with itself:\n%s", out)
	}

	// 17 and 18 built alike, 15 otherwise: 18 is also compared with 17.
	debian, other := "PostgreSQL 15.1 on x86_64, compiled by gcc (Debian) 12, 64-bit", "PostgreSQL 1x on x86_64, compiled by gcc (Ubuntu) 7, 64-bit"
	r.Versions.Runs[0].Server, r.Versions.Runs[2].Server = debian, other
	v18 := versionFixture(18, []float64{800_000, 400_000, 0}, 5, 250, 2200)
	v18.Server = other
	r.Versions.Runs = append(r.Versions.Runs, v18)
	b.Reset()
	versionsSection(func(f string, a ...any) { b.WriteString(fmt.Sprintf(f, a...)) }, r)
	out = b.String()
	for _, want := range []string{
		"- 18: baton's records/s 4.00× over the shapes",
		"  - against 17, built alike: baton's records/s 2.00× over the shapes; database CPU per record 1.00× (5.0 against 5.0 µs); the COPY set-up 0.50× (250 against 500 µs",
		"compiled by gcc (Debian) 12; gcc (Ubuntu) 7",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the section lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "against 15, built alike") || strings.Contains(out, "against 18, built alike") {
		t.Errorf("a major is compared with the baseline twice or with a later major:\n%s", out)
	}

	// Without 15 there are figures but no ratios.
	r.Versions.Runs = r.Versions.Runs[2:3]
	b.Reset()
	versionsSection(func(f string, a ...any) { b.WriteString(fmt.Sprintf(f, a...)) }, r)
	if out := b.String(); strings.Contains(out, "×)") || !strings.Contains(out, "| a | 400000 |") || !strings.Contains(out, "PostgreSQL 15 was not measured") {
		t.Errorf("without 15:\n%s", out)
	}
}

func TestGeoMean(t *testing.T) {
	runs := []versionRun{versionFixture(15, []float64{100, 400}, 1, 1, 1)}
	perSec := func(s shapeRow) float64 { return s.Run.PerSec }
	if got := geoMean(runs[0], []string{"a", "b"}, runs, perSec); math.Abs(got-200) > 1e-9 {
		t.Fatalf("geometric mean of 100 and 400: %v", got)
	}
	if got := geoMean(runs[0], []string{"x"}, runs, perSec); got != 0 {
		t.Fatalf("no shape in common: %v", got)
	}
}
