package main

import (
	"context"
	"fmt"
	"log"
	"slices"
)

// designBatonNoEvents is baton with its ownership history turned off: the
// baseline the events table's cost is measured against.
var designBatonNoEvents = design{Name: "baton-no-events", noEvents: true}

// eventsResult is the events scenario: the same end-to-end run with and
// without the events table, in back-to-back pairs, on the throughput data
// set and on one-record contracts (the worst case: three events per
// record).
type eventsResult struct {
	Workers int          `json:"workers"`
	Sets    []eventsPair `json:"sets"`
}

// eventsPair is one data set's pairs of runs.
type eventsPair struct {
	Dataset *dataset    `json:"dataset"`
	With    []runResult `json:"with"`
	Without []runResult `json:"without"`
	// Events is how many event rows one run with events wrote.
	Events int64 `json:"events"`
}

// ratio is the median over pairs of records/s with events ÷ without.
func (p eventsPair) ratio() float64 {
	var rs []float64
	for i := range min(len(p.With), len(p.Without)) {
		rs = append(rs, p.With[i].PerSec/p.Without[i].PerSec)
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	return rs[len(rs)/2]
}

// cpuRatio is the median over pairs of database plus worker CPU seconds
// with events ÷ without: the cost in work done, which the wall-clock ratio
// (quantized by the until-done poll) can hide. 0 when not measurable.
func (p eventsPair) cpuRatio() float64 {
	var rs []float64
	for i := range min(len(p.With), len(p.Without)) {
		w, wo := p.With[i].CPU, p.Without[i].CPU
		if w.DB < 0 || wo.DB < 0 || wo.DB+wo.Workers == 0 {
			return 0
		}
		rs = append(rs, (w.DB+w.Workers)/(wo.DB+wo.Workers))
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	return rs[len(rs)/2]
}

// runEvents measures the events table's cost: each repetition prices a
// fresh copy of the data with and without it (alternating which goes
// first), with 2 workers.
func (e *env) runEvents(ctx context.Context, res *results) error {
	const workers = 2
	r := &eventsResult{Workers: workers}
	res.Events = r
	main, err := e.throughputDataset(ctx)
	if err != nil {
		return err
	}
	tiny, err := e.seedTemplate(ctx, "tiny", e.cfg.tinyContracts, 1)
	if err != nil {
		return err
	}
	for _, ds := range []*dataset{main, tiny} {
		p := eventsPair{Dataset: ds}
		for rep := 1; rep <= e.cfg.eventsRepeat; rep++ {
			order := []design{designBaton, designBatonNoEvents}
			if rep%2 == 0 {
				order[0], order[1] = order[1], order[0]
			}
			for _, d := range order {
				run, err := e.runDesign(ctx, ds, d, workers, rep, res)
				if err != nil {
					return err
				}
				if d.noEvents {
					p.Without = append(p.Without, run)
				} else {
					p.With = append(p.With, run)
					p.Events = run.HistoryEvents
				}
			}
		}
		log.Printf("events: %s: with ÷ without = %.3f", ds.Name, p.ratio())
		r.Sets = append(r.Sets, p)
	}
	return nil
}

func eventsHeadline(w writer, r *results) {
	if r.Events == nil {
		return
	}
	for _, p := range r.Events.Sets {
		ratio := p.ratio()
		goal, met := "≥ 0.95", yesNo(ratio >= 0.95)
		if p.Dataset.PerContract == 1 {
			goal, met = "— (worst case)", ""
		}
		cpu := ""
		if c := p.cpuRatio(); c > 0 {
			cpu = fmt.Sprintf("; CPU (database + workers) with ÷ without: %.3f", c)
		}
		w("| end-to-end records/s with the events table ÷ without (%d workers, %d×%d records, median of %d back-to-back pairs; %d events a run; run times are quantized by the 1 s until-done poll) | %s | %.3f%s | %s |\n",
			r.Events.Workers, p.Dataset.Contracts, p.Dataset.PerContract, min(len(p.With), len(p.Without)), p.Events, goal, ratio, cpu, met)
	}
}
