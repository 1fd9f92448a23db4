package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/seed"
)

// The shapes scenario: the throughput measurement (2 `worker run
// --until-done` processes at default flags against the single-statement
// SQL ceiling on the same data) over data sets of the same size but
// different contract shapes: many small contracts, fewer larger ones,
// Zipf-sized contracts, and one contract holding half or nine tenths of
// the records. The headline's 1,000 × 1,000 is the first row; the others
// show how far it carries.

// shapeSpec is one row of the table: its contracts and how the records
// are spread over them. The records per contract follow from the size.
type shapeSpec struct {
	Label     string
	Contracts int
	Shape     string // seed.ParseShape text
}

var shapeSpecs = []shapeSpec{
	{"1,000 × 1,000", 1000, "uniform"},
	{"200 × 5,000", 200, "uniform"},
	{"50 × 20,000", 50, "uniform"},
	{"Zipf s = 1.1, 1,000 contracts", 1000, "zipf:1.1"},
	{"one contract 50 %, 999 even", 1000, "hot:0.5"},
	{"one contract 90 %, 999 even", 1000, "hot:0.9"},
}

// Goals of the table: every shape at 1.5× the ceiling, and a hot shape
// at no less than 0.9× the uniform 1,000-contract shape of the same size.
const (
	shapesCeilingGoal = 1.5
	shapesHotGoal     = 0.9
)

// shapesConfig holds the shapes scenario's knobs.
type shapesConfig struct {
	records intFlag
	large   bool
	workers intFlag
	only    string // comma-separated row numbers (1-based) of shapeSpecs; empty: all
}

func (c *shapesConfig) flags(fs *flag.FlagSet) {
	c.records.v, c.workers.v = 1_000_000, 2
	fs.Var(&c.records, "shapes-records", "shapes: records of every shape (default 1000000; -quick 100000)")
	fs.BoolVar(&c.large, "shapes-5m", false, "shapes: also run every shape at 5,000,000 records (about five times as long)")
	fs.Var(&c.workers, "shapes-workers", "shapes: worker processes (default 2)")
	fs.StringVar(&c.only, "shapes-only", "", "shapes: only these rows of the table, by number from 1 (e.g. 1,2,3: the uniform shapes)")
}

func (c *shapesConfig) applyQuick() {
	if !c.records.set {
		c.records.v = 100_000
	}
}

// includes says whether row n (from 1) of shapeSpecs is to be run.
func (c shapesConfig) includes(n int) bool {
	if c.only == "" {
		return true
	}
	for _, f := range strings.Split(c.only, ",") {
		if strings.TrimSpace(f) == strconv.Itoa(n) {
			return true
		}
	}
	return false
}

// sizes are the record counts every shape is run at, in order.
func (c shapesConfig) sizes() []int64 {
	out := []int64{int64(c.records.v)}
	if c.large && c.records.v != 5_000_000 {
		out = append(out, 5_000_000)
	}
	return out
}

// shapeRow is one shape at one size: the data, baton's run and the
// ceiling on the same data.
type shapeRow struct {
	Label       string `json:"label"`
	Shape       string `json:"shape"`
	Contracts   int    `json:"contracts"`
	PerContract int    `json:"records_per_contract"` // the mean, for shapes other than uniform
	Records     int64  `json:"records"`
	// Largest is the records of the largest contract.
	Largest     int64           `json:"largest_contract"`
	LoadSeconds float64         `json:"load_s"`
	Run         *runResult      `json:"run,omitempty"`
	Ceilings    []ceilingResult `json:"ceilings,omitempty"`
	// Last is the contract priced last, with its records; LastSpan is
	// the time from its first batch to its last, and LastAlone the time
	// it was the only contract left, both by priced_at (a batch's
	// transaction start, so short by one batch). A contract is priced by
	// one worker at a time: a large contract's span bounds the run.
	Last        string  `json:"last_contract,omitempty"`
	LastRecords int64   `json:"last_contract_records,omitempty"`
	LastSpan    float64 `json:"last_span_s,omitempty"`
	LastAlone   float64 `json:"last_alone_s,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// shapesResult is the shapes scenario's measurements.
type shapesResult struct {
	Workers int        `json:"workers"`
	Seed    uint64     `json:"seed"`
	Rows    []shapeRow `json:"rows"`
}

// ceiling is the fastest ceiling whose output equals baton's.
func (r shapeRow) ceiling() (ceilingResult, bool) {
	best, ok := ceilingResult{}, false
	for _, c := range r.Ceilings {
		if c.Matches && c.PerSec > best.PerSec {
			best, ok = c, true
		}
	}
	return best, ok
}

// ratio is baton's records/s ÷ the ceiling's, or 0 when either is missing.
func (r shapeRow) ratio() float64 {
	c, ok := r.ceiling()
	if !ok || r.Run == nil || !r.Run.Verified || c.PerSec == 0 {
		return 0
	}
	return r.Run.PerSec / c.PerSec
}

func (r shapeRow) hot() bool {
	s, err := seed.ParseShape(r.Shape)
	return err == nil && s.Kind == seed.Hot
}

// uniform is the row a hot row is held against: the uniform shape with as
// many contracts, at the same size.
func (s *shapesResult) uniform(r shapeRow) (shapeRow, bool) {
	for _, u := range s.Rows {
		if u.Shape == "uniform" && u.Contracts == r.Contracts && u.Records == r.Records && u.Run != nil && u.Run.Verified {
			return u, true
		}
	}
	return shapeRow{}, false
}

// goals says whether a row meets its goals: the ceiling ratio, and for a
// hot row its rate against the uniform row. known is false when a figure
// is missing.
func (s *shapesResult) goals(r shapeRow) (met, known bool, hotRatio float64) {
	ratio := r.ratio()
	if ratio == 0 {
		return false, false, 0
	}
	met, known = ratio >= shapesCeilingGoal, true
	if r.hot() {
		u, ok := s.uniform(r)
		if !ok {
			return false, false, 0
		}
		hotRatio = r.Run.PerSec / u.Run.PerSec
		met = met && hotRatio >= shapesHotGoal
	}
	return met, known, hotRatio
}

// runShapes runs every shape at every size, one after another; a shape
// that fails is recorded with its error and the rest still run.
func (e *env) runShapes(ctx context.Context, res *results) error {
	c := e.cfg.shapes
	s := &shapesResult{Workers: c.workers.v, Seed: e.cfg.seed}
	res.Shapes = s
	var failures int
	for _, n := range c.sizes() {
		for i, spec := range shapeSpecs {
			if !c.includes(i + 1) {
				continue
			}
			row, err := e.runShape(ctx, spec, n, res)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				log.Printf("shapes: %s at %d records: %v", spec.Label, n, err)
				row.Error = err.Error()
				failures++
			}
			s.Rows = append(s.Rows, row)
		}
	}
	if failures > 0 {
		return fmt.Errorf("%d of %d shape runs failed", failures, len(s.Rows))
	}
	return nil
}

// runShape seeds and loads one shape into a template, times the ceiling
// and then baton in fresh copies of it, and drops the template.
func (e *env) runShape(ctx context.Context, spec shapeSpec, records int64, res *results) (shapeRow, error) {
	row := shapeRow{Label: spec.Label, Shape: spec.Shape, Contracts: spec.Contracts}
	shape, err := seed.ParseShape(spec.Shape)
	if err != nil {
		return row, err
	}
	per := records / int64(spec.Contracts)
	if per < 1 {
		return row, fmt.Errorf("%d records cannot fill %d contracts", records, spec.Contracts)
	}
	o := seed.Options{Contracts: spec.Contracts, RecordsPerContract: int(per), Seed: e.cfg.seed, Prefix: "c", Shape: shape}
	row.PerContract, row.Records = o.RecordsPerContract, o.Records()
	sizes, err := o.Sizes()
	if err != nil {
		return row, err
	}
	for _, n := range sizes {
		row.Largest = max(row.Largest, n)
	}
	name := fmt.Sprintf("shape_%d_%s_%d_s%d", spec.Contracts, shapeSlug(shape), row.Records, e.cfg.seed)
	tpl, err := e.template(ctx, name, func(ctx context.Context, db *bun.DB) error {
		dir := filepath.Join(e.tmp, "data-"+name)
		tiers, recs, err := writeSeed(dir, o)
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		log.Printf("shapes: loading %s: %d records", spec.Label, row.Records)
		rep, err := loadPricing(ctx, db, ingest.Options{TiersPath: tiers, RecordsPath: recs})
		if err != nil {
			return fmt.Errorf("loading %s: %w", spec.Label, err)
		}
		row.LoadSeconds = rep.Duration.Seconds()
		return nil
	})
	if err != nil {
		return row, err
	}
	defer e.dropTemplate(ctx, tpl)
	res.addCommand(fmt.Sprintf("worker seed --contracts %d --records-per-contract %d --shape %s --seed %d", o.Contracts, o.RecordsPerContract, shape, o.Seed))

	// The ceiling first, as the throughput scenario does: telescoped, the
	// faster formulation in every throughput run so far.
	cname, cdb, err := e.fresh(ctx, tpl, "shape_ceiling")
	if err != nil {
		return row, err
	}
	log.Printf("shapes: %s: single-statement ceiling", spec.Label)
	ce, err := e.runCeiling(ctx, cdb, "telescoped")
	cdb.Close()
	e.dropDB(ctx, cname)
	if err != nil {
		return row, err
	}
	row.Ceilings = append(row.Ceilings, ce)

	run, err := e.runShapeWorkers(ctx, tpl, &row, sizes, o, res)
	row.Run = &run
	for i := range row.Ceilings {
		row.Ceilings[i].Matches = run.Digest != "" && run.Digest == row.Ceilings[i].Digest
	}
	if err != nil {
		return row, err
	}
	log.Printf("shapes: %s: baton %.0f records/s, ceiling %.0f records/s, ratio %.2f; the last contract (%d records) priced over %.1f s, alone for %.1f s of %.1f s",
		spec.Label, run.PerSec, ce.PerSec, row.ratio(), row.LastRecords, row.LastSpan, row.LastAlone, run.Seconds)
	return row, nil
}

// runShapeWorkers prices a fresh copy of tpl with the scenario's worker
// processes at default flags, verifies and fingerprints the output, reads
// the statements by kind and when the contract priced last was priced.
func (e *env) runShapeWorkers(ctx context.Context, tpl string, row *shapeRow, sizes []int64, o seed.Options, res *results) (runResult, error) {
	r := runResult{Design: designBaton.Name, Workers: e.cfg.shapes.workers.v, Rep: 1, Records: row.Records}
	name, db, err := e.fresh(ctx, tpl, "shape_run")
	if err != nil {
		return r, err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	args := designBaton.workerArgs(0, nil, 0)
	r.Command = e.commandFor(designBaton, "w1", args)
	res.addCommand(r.Command)
	e.checkpoint(ctx)
	_ = e.resetStatements(ctx)
	log.Printf("shapes: %s: %d worker(s)", row.Label, r.Workers)
	logDir := filepath.Join(e.tmp, "logs", "shape-"+name)
	m := startCPU(e.cpu)
	start := time.Now()
	var ps []*proc
	for i := 1; i <= r.Workers; i++ {
		p, err := e.startBaton(e.url(name), logDir, "w"+strconv.Itoa(i), args...)
		if err != nil {
			killAll(ps)
			return r, err
		}
		ps = append(ps, p)
	}
	werr := waitAll(ps, time.Hour)
	var last time.Time
	for _, p := range ps {
		if p.exited.After(last) {
			last = p.exited
		}
	}
	r.Seconds = last.Sub(start).Seconds()
	r.CPU = m.stop()
	r.CPU.Workers = workersCPU(ps)
	r.PerSec = float64(r.Records) / r.Seconds
	if werr != nil {
		return r, werr
	}
	if err := failed(ps, nil); err != nil {
		return r, err
	}
	r.Events = sumEvents(ps)
	if st, err := e.statements(ctx, name); err == nil {
		r.Statements = st
		r.Claims = findKind(st, "claim (CAS)").Rows
	}
	sum, err := verifyPricing(ctx, db)
	if err != nil {
		return r, err
	}
	r.Priced, r.Mismatches = sum.Priced, len(sum.Mismatches)
	r.Verified = len(sum.Mismatches) == 0 && sum.Priced == sum.Records && sum.Records == row.Records
	if r.Digest, err = outputDigest(ctx, db, "baton.priced"); err != nil {
		return r, err
	}
	if row.Last, row.LastSpan, row.LastAlone, err = lastContract(ctx, db); err != nil {
		return r, err
	}
	for i, n := range sizes {
		if o.ContractID(i) == row.Last {
			row.LastRecords = n
		}
	}
	if !r.Verified {
		return r, fmt.Errorf("%s: output failed verification: %d mismatching contracts, %d of %d priced",
			row.Label, r.Mismatches, sum.Priced, sum.Records)
	}
	return r, nil
}

// lastContract reads, by priced_at, which contract was priced last, its
// span and how long it was the only contract left: the serial tail of a
// skewed shape.
func lastContract(ctx context.Context, db bun.IDB) (id string, span, alone float64, err error) {
	err = db.QueryRowContext(ctx, `
		WITH f AS (
		    SELECT contract_id, min(priced_at) AS first, max(priced_at) AS last
		    FROM baton.priced GROUP BY contract_id
		), o AS (
		    SELECT contract_id, first, last, lead(last) OVER (ORDER BY last DESC, contract_id) AS before_last
		    FROM f
		)
		SELECT contract_id, extract(epoch FROM last - first)::float8,
		       coalesce(extract(epoch FROM last - greatest(first, before_last))::float8, 0)
		FROM o ORDER BY last DESC, contract_id LIMIT 1`).Scan(&id, &span, &alone)
	if err != nil {
		return "", 0, 0, fmt.Errorf("reading when the last contract was priced: %w", err)
	}
	return id, max(0, span), max(0, alone), nil
}

// shapeSlug names a shape in a database name.
func shapeSlug(s seed.Shape) string {
	switch s.Kind {
	case seed.Zipf:
		return "zipf" + strconv.FormatFloat(s.Param*100, 'f', 0, 64)
	case seed.Hot:
		return "hot" + strconv.FormatFloat(s.Param*100, 'f', 0, 64)
	}
	return "uniform"
}

// dropTemplate drops a template database and forgets it, so that a large
// data set does not stay on disk for the rest of the run.
func (e *env) dropTemplate(ctx context.Context, name string) {
	e.mu.Lock()
	delete(e.templates, name)
	e.mu.Unlock()
	e.dropDB(ctx, name)
}
