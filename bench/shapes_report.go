package main

import (
	"fmt"
	"strings"
)

// shapesSection renders the shapes scenario: baton against the ceiling
// for every shape, the goals, and where the time went.
func shapesSection(w writer, r *results) {
	s := r.Shapes
	if s == nil || len(s.Rows) == 0 {
		return
	}
	w("## Throughput by contract shape\n\n")
	w("The throughput measurement over data sets of the same size but differently shaped contracts: many small ones, fewer larger ones, "+
		"Zipf-sized ones (contract i holds a share ∝ 1/(i+1)^1.1, so the largest of 1,000 holds 18 %%), and one contract holding half or nine tenths of the records "+
		"with the rest spread evenly over 999 others (`worker seed --shape`, seed %d). Each shape is loaded with baton's loader into a template database; "+
		"in fresh copies of it, after a `CHECKPOINT`, the single-statement SQL ceiling (the telescoped formulation, the faster one in every throughput run) prices it, "+
		"then %d `worker run --until-done` processes at default flags do, timed from the first start to the last exit and checked with `pricer.Verify`. "+
		"The ceiling counts only when its output equals baton's (fingerprint as in the throughput section).\n\n", s.Seed, s.Workers)
	w("Goal: every shape at ≥ %.1f× the ceiling, and a hot shape at ≥ %.1f× the records/s of the uniform shape with as many contracts (1,000 × 1,000) at the same size.\n\n",
		shapesCeilingGoal, shapesHotGoal)
	w("| shape | records | largest contract | baton records/s | ceiling records/s | ÷ ceiling | ÷ uniform | goal | seconds | contract priced last: records, span, alone | verified |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range s.Rows {
		w("| %s | %s | %s |", row.Label, count(row.Records), count(row.Largest))
		if row.Run == nil {
			w(" — | — | — | — | failed | — | — | — |\n")
			continue
		}
		ceil, ratio := "—", "—"
		if c, ok := row.ceiling(); ok {
			ceil, ratio = rate(c.PerSec), fmt.Sprintf("%.2f", row.ratio())
		} else if len(row.Ceilings) > 0 {
			ceil = rate(row.Ceilings[0].PerSec) + " (output differs)"
		}
		met, known, hot := s.goals(row)
		uni, goal := "", "—"
		if hot > 0 {
			uni = fmt.Sprintf("%.2f", hot)
		}
		if known {
			goal = "met"
			if !met {
				goal = "**not met**"
			}
		}
		last := "—"
		if row.Last != "" {
			last = fmt.Sprintf("%s, %.1f s, %.1f s", count(row.LastRecords), row.LastSpan, row.LastAlone)
		}
		w(" %s | %s | %s | %s | %s | %.1f | %s | %s |\n", rate(row.Run.PerSec), ceil, ratio, uni, goal, row.Run.Seconds, last, yesNo(row.Run.Verified))
	}
	w("\n\"Span\" is the time from the first to the last batch of the contract priced last, \"alone\" the part of it after every other contract was done, both by `priced_at` (a batch's transaction start): ")
	w("a contract with more than twice `--segment-records` (default 100,000) unpriced records is split into segments that several workers price at once, so \"alone\" is the time only that contract's segments were left; a smaller contract is priced by one worker at a time.\n\n")
	for _, row := range s.Rows {
		if row.Error != "" {
			w("- %s at %s records failed: %s\n", row.Label, count(row.Records), oneLine(row.Error, 300))
		}
	}
	w("Where the time goes (pg_stat_statements over each baton run, by statement kind; total time includes waiting for CPU and locks):\n\n")
	w("| shape | records | DB CPU µs/record | workers CPU µs/record | statements per 1000 records | claims | busiest statements (share of statement time) |\n|---|---|---|---|---|---|---|\n")
	for _, row := range s.Rows {
		if row.Run == nil {
			continue
		}
		run := row.Run
		stmts, busiest := "n/a", "n/a"
		if len(run.Statements) > 0 {
			stmts = fmt.Sprintf("%.1f", 1000*float64(totalCalls(run.Statements))/float64(run.Records))
			busiest = busiestKinds(run.Statements, 4)
		}
		w("| %s | %s | %s | %.1f | %s | %d | %s |\n", row.Label, count(row.Records), perRecord(run.CPU.DB, run.Records),
			1e6*run.CPU.Workers/float64(max(1, run.Records)), stmts, run.Claims, busiest)
	}
	w("\n")
}

// busiestKinds lists the n statement kinds that took the most time, with
// their share of all statement time.
func busiestKinds(st []stmtKind, n int) string {
	var total float64
	for _, k := range st {
		total += k.TotalMs
	}
	if total == 0 {
		return "n/a"
	}
	var parts []string
	for _, k := range st[:min(n, len(st))] { // st is busiest first
		parts = append(parts, fmt.Sprintf("%s %.0f %%", k.Kind, 100*k.TotalMs/total))
	}
	return strings.Join(parts, ", ")
}
