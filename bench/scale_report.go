package main

import (
	"fmt"
	"slices"
	"strings"
)

// scaleSection renders the scale scenario: stages against the baseline,
// peak RSS of every process, bytes per record by table and index, and
// the priced-output layouts.
func scaleSection(w writer, r *results) {
	s := r.Scale
	if s == nil || len(s.Runs) == 0 {
		return
	}
	t, b := s.target(), s.baseline()
	w("## Scale: %s records end to end\n\n", count(t.Records))
	w("`worker seed` streams %s records (%d per contract) to a CSV file, `worker load` loads it, %d `worker run --until-done` at default flags price it, "+
		"`worker export --out -` writes it to the bench (which counts the lines), and pricer.Verify (the independent SQL recomputation) checks it; "+
		"each a real process, each stage after a CHECKPOINT, in a database of its own.", count(t.Records), s.PerContract, s.Workers)
	if b != nil {
		w(" The same stages at %s records in the same run are the baseline of the ratios.", count(b.Records))
		if s.BaselineAfter != nil {
			w(" Stage by stage: each stage ran on a %s-record baseline, then on the %s records, then on a second baseline, so that a stage's baseline "+
				"(the mean of the two, both shown) ran on the machine as it was just before and just after it.", count(b.Records), count(t.Records))
		}
	}
	w(" Peak RSS is the process's ru_maxrss from wait4.\n\n")
	if !t.Complete {
		w("**The %s-record run did not complete**: %s. The figures below are those of the stages it finished.\n\n", count(t.Records), t.Error)
	}
	if b != nil {
		before := ""
		if s.BaselineAfter != nil {
			before = " (before / after)"
		}
		w("| stage | %s records: records/s%s | %s records: records/s | ratio | goal | met |\n|---|---|---|---|---|---|\n", count(b.Records), before, count(t.Records))
	} else {
		w("| stage | %s records: records/s |\n|---|---|\n", count(t.Records))
	}
	for _, name := range scaleStageNames {
		st, ok := t.stage(name)
		if b == nil {
			if ok {
				w("| %s | %s |\n", name, rate(st.PerSec))
			}
			continue
		}
		bRate, bRates, okb := s.baselineRate(name)
		bCell := rate(bRate)
		if len(bRates) > 1 {
			var parts []string
			for _, v := range bRates {
				parts = append(parts, rate(v))
			}
			bCell += " (" + strings.Join(parts, " / ") + ")"
		}
		switch {
		case ok && okb:
			ratio := st.PerSec / bRate
			goal, met := "≥ 0.8", yesNo(ratio >= scaleRatioGoal)
			if name == "seed" {
				goal, met = "—", "" // the generator, not baton
			}
			w("| %s | %s | %s | %.2f | %s | %s |\n", name, bCell, rate(st.PerSec), ratio, goal, met)
		case okb:
			w("| %s | %s | not reached | | ≥ 0.8 | **no** |\n", name, bCell)
		}
	}
	verify := func(r *scaleRun) string {
		if r.VerifySeconds == 0 {
			return "not reached"
		}
		return fmt.Sprintf("%.1f s (%s)", r.VerifySeconds, map[bool]string{true: "verified", false: "**failed**"}[r.Verified])
	}
	w("| verify (pricer.Verify) | %s | %s | | | |\n\n", func() string {
		if b == nil {
			return ""
		}
		return verify(b)
	}(), verify(t))

	w("Peak RSS of every process (goal ≤ %d MiB each):\n\n| records | stage | process | peak RSS | CPU s | wall s | met |\n|---|---|---|---|---|---|---|\n", scaleRSSGoal>>20)
	all := s.Runs
	if s.BaselineAfter != nil {
		all = append(slices.Clone(s.Runs), s.BaselineAfter)
	}
	for _, run := range all {
		for _, st := range run.Stages {
			for _, p := range st.Procs {
				met := yesNo(p.PeakRSS <= scaleRSSGoal)
				if st.Name == "seed" {
					met = "—"
				}
				label := count(run.Records)
				if run == s.BaselineAfter {
					label += " (second baseline)"
				}
				w("| %s | %s | %s | %s | %.1f | %.1f | %s |\n", label, st.Name, p.ID, rssMiB(p.PeakRSS), p.CPU, p.Seconds, met)
			}
		}
	}
	w("\n")

	var measured []*scaleRun
	for _, run := range s.Runs {
		if len(run.Tables) > 0 {
			measured = append(measured, run)
		}
	}
	if len(measured) > 0 {
		w("Database bytes per record after verification, by table (heap with its maps, TOAST with its index) and index:\n\n| table | part |")
		for _, run := range measured {
			w(" %s records |", count(run.Records))
		}
		w("\n|---|---|%s\n", repeatCell(len(measured)))
		// Tables of at least 1% of the largest run's database in detail,
		// the rest in one line.
		var names []string
		large := measured[len(measured)-1]
		for _, tb := range large.Tables {
			if tb.total() >= large.DBBytes/100 {
				names = append(names, tb.Table)
			}
		}
		find := func(run *scaleRun, name string) (tableSize, bool) {
			for _, tb := range run.Tables {
				if tb.Table == name {
					return tb, true
				}
			}
			return tableSize{}, false
		}
		for _, name := range names {
			parts := [][2]string{{"total", ""}, {"heap", ""}, {"toast", ""}}
			var ixNames []string
			for _, run := range measured {
				if tb, ok := find(run, name); ok {
					for _, ix := range tb.Indexes {
						if !slices.Contains(ixNames, ix.Name) {
							ixNames = append(ixNames, ix.Name)
						}
					}
				}
			}
			for _, ix := range ixNames {
				parts = append(parts, [2]string{"index", ix})
			}
			for _, part := range parts {
				label := part[0]
				if part[1] != "" {
					label = "index " + part[1]
				}
				row := fmt.Sprintf("| %s | %s |", name, label)
				nonzero := false
				for _, run := range measured {
					tb, _ := find(run, name)
					var v int64
					switch part[0] {
					case "total":
						v = tb.total()
					case "heap":
						v = tb.Heap
					case "toast":
						v = tb.Toast
					default:
						for _, ix := range tb.Indexes {
							if ix.Name == part[1] {
								v = ix.Bytes
							}
						}
					}
					nonzero = nonzero || v >= 8192*2
					row += fmt.Sprintf(" %s |", bpr(v, run.Records))
				}
				// Small tables are shown by their total only.
				if part[0] == "total" || nonzero {
					w("%s\n", row)
				}
			}
		}
		w("| other tables of baton (%s) | total |", func() string {
			var others []string
			for _, tb := range large.Tables {
				if !slices.Contains(names, tb.Table) {
					others = append(others, tb.Table)
				}
			}
			return strings.Join(others, ", ")
		}())
		for _, run := range measured {
			var v int64
			for _, tb := range run.Tables {
				if !slices.Contains(names, tb.Table) {
					v += tb.total()
				}
			}
			w(" %s |", bpr(v, run.Records))
		}
		w("\n| outside baton's tables (system catalogs) | total |")
		for _, run := range measured {
			v := run.DBBytes
			for _, tb := range run.Tables {
				v -= tb.total()
			}
			w(" %s |", bpr(v, run.Records))
		}
		w("\n| **database** (pg_database_size) | |")
		for _, run := range measured {
			w(" **%s** (%s) |", bpr(run.DBBytes, run.Records), gib(run.DBBytes))
		}
		w("\n\n")
	}
	for _, run := range s.Runs {
		if run.Disk.FreeBytes > 0 {
			w("Disk before the %s-record run: %s free, about %s needed (at %.0f bytes per record in the database). ",
				count(run.Records), gib(run.Disk.FreeBytes), gib(run.Disk.NeededBytes), run.Disk.DBPerRecord)
		}
	}
	w("\n\n")
	storageSection(w, s.Storage)
}

func repeatCell(n int) string {
	out := ""
	for range n {
		out += "---|"
	}
	return out
}

// count writes n with thousands separators.
func count(n int64) string {
	s := fmt.Sprintf("%d", n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func storageSection(w writer, st *storageResult) {
	if st == nil || len(st.Layouts) == 0 {
		return
	}
	w("### Priced output: layouts compared (%s records, %d contracts)\n\n", count(st.Records), st.Contracts)
	w("Each layout is built from the same priced rows in a schema of its own: one binary COPY into the empty table with its key in place (the write), "+
		"then VACUUM ANALYZE; it is read through a view with priced's per-row shape: as `worker export` reads (every row ordered by contract and seq, COPY TO STDOUT), "+
		"a sum over every row, and %d contracts one by one in seq order (%d for a layout without a key, where each is a scan of the whole table; each read the faster of two). Every view returned the same rows as priced (md5 of the export read). "+
		"Layouts that take record_id and gross from the records depend on them staying (no pruning of records without their priced output).\n\n", st.Lookups, min(st.Lookups, noKeyLookups))
	row := st.Layouts[0]
	w("| layout | bytes/record | ÷ priced | write s | ÷ priced | export read s | sum s | one contract ms | same rows |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range st.Layouts {
		w("| `%s`: %s | %.1f (heap %.1f, toast %.1f, index %.1f) | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %s |\n", l.Name, l.Description,
			l.PerRecord, bytesPerRecord(l.Heap, st.Records), bytesPerRecord(l.Toast, st.Records), bytesPerRecord(l.Index, st.Records),
			l.PerRecord/row.PerRecord, l.WriteSeconds, l.WriteSeconds/row.WriteSeconds, l.ExportSeconds, l.SumSeconds, l.LookupMs, yesNo(l.Matches))
	}
	storageAdvice(w, st)
	if st.Layouts[0].ExportPlan != "" {
		w("\nThe plan of each layout's export read (EXPLAIN ANALYZE) is in results.json (`scale.storage.layouts[].export_plan`).\n")
	}
	for _, s := range st.Skipped {
		w("\nSkipped: %s\n", s)
	}
	w("\n")
}

// storageAdvice is the recommendation drawn from the layouts' figures.
func storageAdvice(w writer, st *storageResult) {
	find := func(name string) (layoutResult, bool) {
		for _, l := range st.Layouts {
			if l.Name == name {
				return l, true
			}
		}
		return layoutResult{}, false
	}
	row, ok1 := find("row")
	nokey, ok2 := find("row_nokey")
	chunk, ok3 := find("discounts_lz4")
	if !ok3 {
		chunk, ok3 = find("discounts")
	}
	if !ok1 || !ok2 || !ok3 {
		return
	}
	w("\n**Recommendation.** The per-row layout costs %.0f bytes per record, %.0f of them the primary key; the heap is the rest: a tuple header and "+
		"the contract id, record id and audit columns repeated on every row. Dropping only the key saves %.0f%% of the bytes and %.0f%% of the write but makes "+
		"a contract's rows a scan of the whole table (%.0f ms against %.1f ms). Discounts stored as one array per record chunk (`%s`) cost %.1f bytes per record "+
		"(%.0f%% less) and %.2f× the write time, and a contract still reads through its key (%.1f ms); every other column is the records' own or derived. "+
		"Its cost is on full reads through the per-row view: an export-shaped read takes %.1f s against %.1f s, because the view's rows must be sorted "+
		"(the planner cannot know the order of unnest), which a reader of the chunks in key order avoids. So: a chunked output keyed like record_chunks, "+
		"with a view `priced` of today's shape for SQL readers, is worth building for data sets of this size (at 10^8 records it would save about %.0f GB); "+
		"what the per-row key guarantees today (no record priced twice) would then rest on the chunk key plus the fenced checkpoint, and a batch that "+
		"ends inside a record chunk must extend that chunk's discounts (or the chunks follow the batches instead of the record chunks, with a range join in the view). "+
		"This is a measurement: the production schema is unchanged.\n",
		row.PerRecord, bytesPerRecord(row.Index, st.Records), 100*(1-nokey.PerRecord/row.PerRecord), 100*(1-nokey.WriteSeconds/row.WriteSeconds),
		nokey.LookupMs, row.LookupMs, chunk.Name, chunk.PerRecord, 100*(1-chunk.PerRecord/row.PerRecord), chunk.WriteSeconds/row.WriteSeconds,
		chunk.LookupMs, chunk.ExportSeconds, row.ExportSeconds, (row.PerRecord-chunk.PerRecord)*1e8/1e9)
}
