package main

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// runResult is one end-to-end pricing run: a fresh copy of the data set
// priced by worker processes of one design until done.
type runResult struct {
	Design      string     `json:"design"`
	Workers     int        `json:"workers"`
	Rep         int        `json:"rep"`
	Records     int64      `json:"records"`
	Seconds     float64    `json:"seconds"` // first process started → last exited
	PerSec      float64    `json:"records_per_s"`
	CPU         cpuUse     `json:"cpu"`
	Statements  []stmtKind `json:"statements,omitempty"`
	HBPerWorker float64    `json:"heartbeats_per_worker_interval,omitempty"`
	Claims      int64      `json:"claims,omitempty"`
	Events      events     `json:"events"`
	// HistoryEvents counts the rows the run wrote to the events table.
	HistoryEvents int64  `json:"history_events,omitempty"`
	Verified      bool   `json:"verified"`
	Mismatches    int    `json:"mismatches"`
	Priced        int64  `json:"priced"`
	Digest        string `json:"digest"`
	Command       string `json:"command"`
}

// throughputResult is scenario 1 (and the peers' throughput runs).
type throughputResult struct {
	Dataset  *dataset        `json:"dataset"`
	Runs     []runResult     `json:"runs"`
	Ceilings []ceilingResult `json:"ceilings"`
	Copies   []copyResult    `json:"copies"`
	Plan     string          `json:"ceiling_plan"`
}

// median of the runs of one design at one worker count.
func (t *throughputResult) median(design string, workers int) (runResult, bool) {
	var rs []runResult
	for _, r := range t.Runs {
		if r.Design == design && r.Workers == workers {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return runResult{}, false
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].PerSec < rs[j].PerSec })
	return rs[len(rs)/2], true
}

// ceiling is the best (fastest) correct single-statement rate.
func (t *throughputResult) ceiling() (ceilingResult, bool) {
	best, ok := ceilingResult{}, false
	for _, c := range t.Ceilings {
		if c.Matches && c.PerSec > best.PerSec {
			best, ok = c, true
		}
	}
	return best, ok
}

func (t *throughputResult) copyRate() (copyResult, bool) {
	if len(t.Copies) == 0 {
		return copyResult{}, false
	}
	cs := append([]copyResult(nil), t.Copies...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].PerSec < cs[j].PerSec })
	return cs[len(cs)/2], true
}

func (e *env) throughputDataset(ctx context.Context) (*dataset, error) {
	return e.seedTemplate(ctx, "main", e.cfg.contracts, e.cfg.perContract)
}

// runThroughput is scenario 1: baton at each worker count, the SQL ceiling
// and COPY, in every repetition.
func (e *env) runThroughput(ctx context.Context, res *results) error {
	ds, err := e.throughputDataset(ctx)
	if err != nil {
		return err
	}
	t := &throughputResult{Dataset: ds}
	res.Throughput = t
	for rep := 1; rep <= e.cfg.repeat; rep++ {
		if err := e.runReference(ctx, ds, t, res); err != nil {
			return err
		}
		for _, w := range e.cfg.workers {
			r, err := e.runDesign(ctx, ds, designBaton, w, rep, res)
			if err != nil {
				return err
			}
			t.Runs = append(t.Runs, r)
		}
	}
	e.matchCeilings(t)
	return nil
}

// matchCeilings marks the ceilings whose output equals baton's.
func (e *env) matchCeilings(t *throughputResult) {
	for i := range t.Ceilings {
		c := &t.Ceilings[i]
		for _, r := range t.Runs {
			if r.Design == "baton" && r.Digest != "" && r.Digest == c.Digest {
				c.Matches = true
			}
		}
	}
}

// runReference times the ceiling statement (numeric and, when the data
// allows, bigint) and COPY of the same rows, in a fresh copy of the data.
func (e *env) runReference(ctx context.Context, ds *dataset, t *throughputResult, res *results) error {
	name, db, err := e.fresh(ctx, ds.template, "ceiling")
	if err != nil {
		return err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	for _, v := range ceilingVariants {
		log.Printf("throughput: single-statement ceiling (%s)", v)
		c, err := e.runCeiling(ctx, db, v)
		if err != nil {
			return err
		}
		log.Printf("throughput: ceiling %s: %.0f records/s", v, c.PerSec)
		t.Ceilings = append(t.Ceilings, c)
		res.addCommand("ceiling (" + v + "): " + oneLine(ceilingStatement("ceiling_"+v, v), 100000))
	}
	if t.Plan == "" {
		t.Plan = explainCeiling(ctx, db, "telescoped")
	}
	log.Printf("throughput: COPY of the same rows")
	cp, err := e.runCopy(ctx, db, "ceiling_direct")
	if err != nil {
		return err
	}
	log.Printf("throughput: COPY: %.0f records/s", cp.PerSec)
	t.Copies = append(t.Copies, cp)
	return nil
}

// runDesign prices a fresh copy of ds with n worker processes of design d,
// verifies the output, and removes the copy.
func (e *env) runDesign(ctx context.Context, ds *dataset, d design, n, rep int, res *results) (runResult, error) {
	r := runResult{Design: d.Name, Workers: n, Rep: rep, Records: ds.Records}
	name, db, err := e.fresh(ctx, ds.template, "run")
	if err != nil {
		return r, err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	if err := d.prepare(ctx, db); err != nil {
		return r, err
	}
	args := d.workerArgs(0, nil, e.cfg.peerConc)
	r.Command = e.commandFor(d, "w1", args)
	res.addCommand(r.Command)
	e.checkpoint(ctx)
	_ = e.resetStatements(ctx)
	log.Printf("throughput: %s with %d worker(s), run %d", d.Name, n, rep)
	logDir := filepath.Join(e.tmp, "logs", fmt.Sprintf("%s-%d-%d", d.Name, n, rep))
	m := startCPU(e.cpu)
	start := time.Now()
	var ps []*proc
	for i := 1; i <= n; i++ {
		p, err := e.startWorker(d, e.url(name), logDir, "w"+strconv.Itoa(i), args)
		if err != nil {
			killAll(ps)
			return r, err
		}
		ps = append(ps, p)
	}
	werr := waitAll(ps, 30*time.Minute)
	var last time.Time
	for _, p := range ps {
		if p.exited.After(last) {
			last = p.exited
		}
	}
	r.Seconds = last.Sub(start).Seconds()
	r.CPU = m.stop()
	r.CPU.Workers = workersCPU(ps)
	r.PerSec = float64(ds.Records) / r.Seconds
	if werr != nil {
		return r, werr
	}
	if err := failed(ps, nil); err != nil {
		return r, err
	}
	r.Events = sumEvents(ps)
	if st, err := e.statements(ctx, name); err == nil {
		r.Statements = st
		hb := findKind(st, "heartbeat").Calls
		r.Claims = findKind(st, "claim (CAS)").Rows
		if d.peer == "" && hb > 0 {
			// Each worker registers with one heartbeat at start, then
			// beats once per full interval it lives (default 1s).
			var intervals int64
			for _, p := range ps {
				intervals += int64(p.exited.Sub(p.started) / time.Second)
			}
			if intervals > 0 {
				r.HBPerWorker = float64(hb-int64(len(ps))) / float64(intervals)
			}
		}
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.events`).Scan(&r.HistoryEvents); err != nil {
		return r, fmt.Errorf("counting events: %w", err)
	}
	sum, err := verifyPricing(ctx, db)
	if err != nil {
		return r, err
	}
	r.Priced, r.Mismatches = sum.Priced, len(sum.Mismatches)
	r.Verified = len(sum.Mismatches) == 0 && sum.Priced == sum.Records && sum.Records == ds.Records
	if r.Digest, err = outputDigest(ctx, db, "baton.priced"); err != nil {
		return r, err
	}
	log.Printf("throughput: %s with %d worker(s): %.0f records/s in %.1fs, db cpu %.1fs, verified=%v",
		d.Name, n, r.PerSec, r.Seconds, r.CPU.DB, r.Verified)
	if !r.Verified {
		return r, fmt.Errorf("%s with %d workers: output failed verification: %d mismatching contracts, %d of %d priced",
			d.Name, n, r.Mismatches, sum.Priced, sum.Records)
	}
	return r, nil
}
