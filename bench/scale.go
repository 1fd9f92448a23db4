package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/uptrace/bun"
)

// The scale scenario runs baton's commands end to end on a month of
// metered usage (10^8 records by default) and, in the same run, on a
// baseline of 10^6 records: `worker seed` streams the CSV to a file,
// `worker load` loads it, two `worker run --until-done` at default flags
// price it, `worker export --out -` writes it (to the bench, which counts
// the lines and throws them away) and pricer.Verify, the independent SQL
// recomputation behind the demo's and the throughput scenario's check,
// verifies it. Every stage is a real worker process whose peak RSS comes
// from wait4's rusage. The database's bytes are measured per table (heap,
// TOAST, each index) before it is dropped. The disk is checked before
// anything is written, and again, with the baseline's measured bytes per
// record, before the large run.

// scaleResult is the scale scenario's measurements: each size's stages,
// each stage's rate against the baseline's, the database's bytes per
// record by table and index, and the priced-output layouts compared.
type scaleResult struct {
	PerContract int `json:"records_per_contract"`
	Workers     int `json:"workers"`
	// Runs are the baseline first, then the large run (as far as it got).
	Runs []*scaleRun `json:"runs"`
	// BaselineAfter is the second baseline: each of its stages ran right
	// after the large run's. A stage's baseline rate is the mean of the
	// two.
	BaselineAfter *scaleRun      `json:"baseline_after,omitempty"`
	Storage       *storageResult `json:"storage,omitempty"`
}

// scaleRun is one size, end to end.
type scaleRun struct {
	Records   int64        `json:"records"`
	Contracts int          `json:"contracts"`
	CSVBytes  int64        `json:"csv_bytes"`
	Disk      diskCheck    `json:"disk"`
	Stages    []scaleStage `json:"stages"`
	// ExportLines counts the data lines `worker export --out -` wrote.
	ExportLines   int64   `json:"export_lines"`
	VerifySeconds float64 `json:"verify_s"`
	Verified      bool    `json:"verified"`
	Mismatches    int     `json:"mismatches"`
	Priced        int64   `json:"priced"`
	// Tables are baton's tables' sizes right after verification.
	Tables   []tableSize `json:"tables"`
	DBBytes  int64       `json:"database_bytes"`
	Complete bool        `json:"complete"`
	Error    string      `json:"error,omitempty"`
}

// scaleStage is one stage: its processes, first start to last exit.
type scaleStage struct {
	Name    string      `json:"name"`
	Seconds float64     `json:"seconds"`
	PerSec  float64     `json:"records_per_s"`
	Procs   []stageProc `json:"procs"`
}

func (r *scaleRun) stage(name string) (scaleStage, bool) {
	for _, s := range r.Stages {
		if s.Name == name {
			return s, true
		}
	}
	return scaleStage{}, false
}

// baseline is the run the others are compared with (the first).
func (s *scaleResult) baseline() *scaleRun {
	if s == nil || len(s.Runs) < 2 {
		return nil
	}
	return s.Runs[0]
}

// baselineRate is stage name's baseline records/s: the mean of the
// baselines that ran it (before and after the large run's).
func (s *scaleResult) baselineRate(name string) (mean float64, rates []float64, ok bool) {
	b := s.baseline()
	if b == nil {
		return 0, nil, false
	}
	for _, r := range []*scaleRun{b, s.BaselineAfter} {
		if r == nil {
			continue
		}
		if st, ok := r.stage(name); ok && st.PerSec > 0 {
			rates = append(rates, st.PerSec)
			mean += st.PerSec
		}
	}
	if len(rates) == 0 {
		return 0, nil, false
	}
	return mean / float64(len(rates)), rates, true
}

// target is the large run, once it has begun.
func (s *scaleResult) target() *scaleRun {
	if s == nil || len(s.Runs) == 0 {
		return nil
	}
	return s.Runs[len(s.Runs)-1]
}

// scaleStageNames are the timed stages in order.
var scaleStageNames = []string{"seed", "load", "run", "export"}

// Goals of the scenario.
const (
	scaleRatioGoal = 0.8       // a stage's records/s at the large size ÷ at the baseline
	scaleRSSGoal   = 256 << 20 // peak RSS of any worker process
)

// runScale runs the baseline and the large size end to end, stage by
// stage: each stage runs on the baseline, then on the large size, then on
// a second baseline, so that the baseline a stage's ratio is taken
// against ran just before and just after it, on the machine as it was
// then (on a machine shared with other work, a baseline measured once at
// the start of a run that lasts most of an hour says more about that
// moment than about the loader).
func (e *env) runScale(ctx context.Context, res *results) error {
	c := e.cfg.scale
	if err := c.validate(); err != nil {
		return err
	}
	sr := &scaleResult{PerContract: c.perContract, Workers: scaleWorkers}
	res.Scale = sr
	// Before anything is written: the large run's estimate at the
	// default bytes per record.
	if _, err := e.checkDisk(c.records, 0, 0); err != nil {
		return err
	}
	newRun := func(n int64) *scaleRun { return &scaleRun{Records: n, Contracts: int(n / int64(c.perContract))} }
	var ps []*scalePipeline
	defer func() {
		for _, p := range ps {
			p.close(context.WithoutCancel(ctx))
		}
	}()
	open := func(r *scaleRun, label string) (*scalePipeline, error) {
		p, err := e.openScalePipeline(ctx, r, label, res)
		if p != nil {
			ps = append(ps, p)
		}
		return p, err
	}
	var before, after, large *scalePipeline
	var err error
	if c.baseline > 0 && c.baseline != c.records {
		b := newRun(c.baseline)
		if b.Disk, err = e.checkDisk(b.Records, 0, 0); err != nil {
			return err
		}
		sr.Runs = append(sr.Runs, b)
		if before, err = open(b, strconv.FormatInt(b.Records, 10)); err != nil {
			return err
		}
		a := newRun(c.baseline)
		sr.BaselineAfter = a
		if after, err = open(a, strconv.FormatInt(a.Records, 10)+"-after"); err != nil {
			return err
		}
	}
	target := newRun(c.records)
	sr.Runs = append(sr.Runs, target)
	// With the bytes per record of the baseline, once it has measured
	// them (after its seed), the disk is checked again before the large
	// run writes.
	if large, err = open(target, strconv.FormatInt(target.Records, 10)); err != nil {
		return err
	}
	order := []*scalePipeline{large}
	if before != nil {
		order = []*scalePipeline{before, large, after}
	}
	steps := []struct {
		name string
		fn   func(*scalePipeline) error
	}{
		{"seed", (*scalePipeline).seed},
		{"load", (*scalePipeline).load},
		{"run", (*scalePipeline).run},
		{"export", (*scalePipeline).export},
		{"verify", (*scalePipeline).verify},
	}
	last := slices.Index(scaleSteps, c.until)
	for i, st := range steps {
		if i > last {
			log.Printf("scale: %s and later stages skipped (-scale-until %s)", st.name, c.until)
			break
		}
		for _, p := range order {
			if p == large && st.name == "seed" && before != nil {
				b := before.r
				if target.Disk, err = e.checkDisk(target.Records, bytesPerRecord(b.DBBytes, b.Records), bytesPerRecord(b.CSVBytes, b.Records)); err != nil {
					target.Error = err.Error()
					return err
				}
			}
			if err := st.fn(p); err != nil {
				p.r.Error = err.Error()
				return fmt.Errorf("%d records: %s: %w", p.r.Records, st.name, err)
			}
		}
	}
	for _, p := range order {
		if err := p.measure(sr); err != nil {
			p.r.Error = err.Error()
			return fmt.Errorf("%d records: %w", p.r.Records, err)
		}
		p.r.Complete = true
	}
	return nil
}

// scaleWorkers is the number of `worker run` processes.
const scaleWorkers = 2

// scalePipeline is one size's database, files and stages.
type scalePipeline struct {
	e       *env
	ctx     context.Context
	res     *results
	r       *scaleRun
	dir     string
	logDir  string
	name    string
	url     string
	tiers   string
	records string
	db      *bun.DB    // conn's, for the bench's own reads
	conn    *dbconn.DB // opened by open
}

// openScalePipeline creates r's database (migrated) and directory.
func (e *env) openScalePipeline(ctx context.Context, r *scaleRun, label string, res *results) (*scalePipeline, error) {
	p := &scalePipeline{e: e, ctx: ctx, res: res, r: r,
		dir:    filepath.Join(e.tmp, "scale-"+label),
		logDir: filepath.Join(e.tmp, "logs", "scale-"+label),
		name:   "bench_scale_" + strings.ReplaceAll(label, "-", "_") + "_" + randomSuffix()}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", p.dir, err)
	}
	if err := e.createDB(ctx, p.name, ""); err != nil {
		os.RemoveAll(p.dir)
		return nil, err
	}
	p.url = e.url(p.name)
	p.tiers, p.records = filepath.Join(p.dir, "tiers.csv"), filepath.Join(p.dir, "records.csv")
	if _, err := p.proc("migrate"); err != nil {
		return p, err
	}
	return p, nil
}

// close drops the database and removes the files.
func (p *scalePipeline) close(ctx context.Context) {
	if p.db != nil {
		p.db.Close()
	}
	p.e.dropDB(ctx, p.name)
	os.RemoveAll(p.dir)
}

// proc runs one worker command, named by its subcommand.
func (p *scalePipeline) proc(args ...string) (stageProc, error) {
	return p.e.runStageProc(p.ctx, p.e.cfg.scale.timeout, p.url, p.logDir, args[0], nil, p.res, args...)
}

// seed streams the CSV to a file.
func (p *scalePipeline) seed() error {
	c := p.e.cfg.scale
	log.Printf("scale: %d records (%d contracts × %d)", p.r.Records, p.r.Contracts, c.perContract)
	sp, err := p.proc("seed", "--contracts", strconv.Itoa(p.r.Contracts),
		"--records-per-contract", strconv.Itoa(c.perContract), "--seed", strconv.FormatUint(p.e.cfg.seed, 10), "--dir", p.dir)
	if err != nil {
		return err
	}
	p.r.addStage("seed", sp.Seconds, []stageProc{sp})
	if st, err := os.Stat(p.records); err == nil {
		p.r.CSVBytes = st.Size()
	}
	return nil
}

// load loads the file, then removes it.
func (p *scalePipeline) load() error {
	p.e.checkpoint(p.ctx)
	sp, err := p.proc("load", "--tiers", p.tiers, "--records", p.records)
	if err != nil {
		return err
	}
	p.r.addStage("load", sp.Seconds, []stageProc{sp})
	if err := os.Remove(p.records); err != nil {
		log.Printf("scale: removing %s: %v", p.records, err)
	}
	return nil
}

// run prices with two workers at default flags until every contract is
// done.
func (p *scalePipeline) run() error {
	p.e.checkpoint(p.ctx)
	var args [][]string
	for i := 1; i <= scaleWorkers; i++ {
		args = append(args, []string{"run", "--id", "w" + strconv.Itoa(i), "--log-format", "json", "--until-done"})
	}
	ps, secs, err := p.e.runStageProcs(p.ctx, p.e.cfg.scale.timeout, p.url, p.logDir, p.res, args)
	if err != nil {
		return err
	}
	p.r.addStage("run", secs, ps)
	return nil
}

// export writes to the bench: lines counted, bytes thrown away.
func (p *scalePipeline) export() error {
	p.e.checkpoint(p.ctx)
	var out lineCounter
	sp, err := p.e.runStageProc(p.ctx, p.e.cfg.scale.timeout, p.url, p.logDir, "export", &out, p.res, "export", "--out", "-")
	if err != nil {
		return err
	}
	p.r.addStage("export", sp.Seconds, []stageProc{sp})
	p.r.ExportLines = max(0, out.lines-1) // the header
	if p.r.ExportLines != p.r.Records {
		return fmt.Errorf("worker export wrote %d records, want %d", p.r.ExportLines, p.r.Records)
	}
	return nil
}

// verify runs pricer.Verify, the independent SQL recomputation.
func (p *scalePipeline) verify() error {
	if err := p.open(); err != nil {
		return err
	}
	r := p.r
	p.e.checkpoint(p.ctx)
	log.Printf("scale: %d records: verifying (pricer.Verify)", r.Records)
	t0 := time.Now()
	sum, err := pricer.NewStore(p.conn, "").Verify(p.ctx)
	if err != nil {
		return fmt.Errorf("verifying %d records: %w", r.Records, err)
	}
	r.VerifySeconds = time.Since(t0).Seconds()
	r.Priced, r.Mismatches = sum.Priced, len(sum.Mismatches)
	r.Verified = len(sum.Mismatches) == 0 && sum.Priced == sum.Records && sum.Records == r.Records
	log.Printf("scale: %d records: verified=%v in %.1fs (%d priced, %d mismatching contracts)",
		r.Records, r.Verified, r.VerifySeconds, r.Priced, r.Mismatches)
	if !r.Verified {
		return fmt.Errorf("output failed verification: %d mismatching contracts, %d of %d priced", r.Mismatches, sum.Priced, r.Records)
	}
	return nil
}

// open opens the bench's own handle on the pipeline's database, once.
func (p *scalePipeline) open() error {
	if p.db != nil {
		return nil
	}
	db, err := dbconn.Open(p.url, dbconn.Options{MaxOpenConns: 4, ApplicationName: "bench-scale"})
	if err != nil {
		return err
	}
	p.conn, p.db = db, db.DB
	return nil
}

// measure takes the database's bytes by table and, for the run of
// -scale-storage-records, compares the priced-output layouts.
func (p *scalePipeline) measure(sr *scaleResult) error {
	r, c := p.r, p.e.cfg.scale
	if err := p.open(); err != nil { // not yet opened when the stages stopped before verify
		return err
	}
	var err error
	if r.Tables, r.DBBytes, err = tableSizes(p.ctx, p.db, "baton"); err != nil {
		return err
	}
	for _, t := range r.Tables {
		if t.total() < r.DBBytes/100 {
			continue
		}
		log.Printf("scale: %d records: %s: %s bytes/record (heap %s, toast %s, indexes %s)", r.Records, t.Table,
			bpr(t.total(), r.Records), bpr(t.Heap, r.Records), bpr(t.Toast, r.Records), bpr(t.IndexBytes(), r.Records))
	}
	log.Printf("scale: %d records: database %s bytes/record", r.Records, bpr(r.DBBytes, r.Records))
	if c.storageRecords == r.Records && sr.Storage == nil && slices.Index(scaleSteps, c.until) >= slices.Index(scaleSteps, "run") {
		st, err := p.e.measureStorage(p.ctx, p.db, r.Records, c.lookups)
		if st != nil {
			sr.Storage = st
		}
		if err != nil {
			return fmt.Errorf("measuring priced layouts: %w", err)
		}
	}
	return nil
}

func (r *scaleRun) addStage(name string, seconds float64, ps []stageProc) {
	s := scaleStage{Name: name, Seconds: seconds, Procs: ps}
	if seconds > 0 {
		s.PerSec = float64(r.Records) / seconds
	}
	r.Stages = append(r.Stages, s)
	var peak int64
	for _, p := range ps {
		peak = max(peak, p.PeakRSS)
	}
	log.Printf("scale: %d records: %s: %.1fs, %.0f records/s, peak RSS %s", r.Records, name, seconds, s.PerSec, rssMiB(peak))
}

// bytesPerRecord is bytes ÷ records, 0 without records.
func bytesPerRecord(bytes, records int64) float64 {
	if records <= 0 {
		return 0
	}
	return float64(bytes) / float64(records)
}

func bpr(bytes, records int64) string { return fmt.Sprintf("%.1f", bytesPerRecord(bytes, records)) }

func rssMiB(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// scaleConfig holds the scale scenario's knobs.
type scaleConfig struct {
	// records is the large run's size. Defaults to 100,000,000.
	records int64
	// perContract is records per contract. Defaults to 1,000.
	perContract int
	// baseline is the size measured first, the ratios' denominator
	// (0: none). Defaults to 1,000,000.
	baseline int64
	// timeout bounds each stage. Defaults to 4h.
	timeout time.Duration
	// storageRecords is the run whose output the priced-layout
	// comparison uses (0: none). Defaults to the baseline's 1,000,000.
	storageRecords int64
	// lookups is the contracts read one by one per layout. Defaults to 100.
	lookups int
	// until is the last stage run (seed, load, run, export or verify), so
	// that one stage can be measured at size without the rest. Defaults
	// to verify: all of them.
	until string
}

func (c *scaleConfig) flags(fs *flag.FlagSet) {
	*c = scaleConfig{records: 100_000_000, perContract: 1000, baseline: 1_000_000, timeout: 4 * time.Hour,
		storageRecords: 1_000_000, lookups: 100, until: "verify"}
	fs.Int64Var(&c.records, "scale-records", c.records, "scale: records of the large run (needs about 300 bytes of disk per record)")
	fs.IntVar(&c.perContract, "scale-records-per-contract", c.perContract, "scale: records per contract")
	fs.Int64Var(&c.baseline, "scale-baseline", c.baseline, "scale: records of the baseline run the large one is compared with (0: none)")
	fs.DurationVar(&c.timeout, "scale-stage-timeout", c.timeout, "scale: longest a stage (seed, load, run, export) may take")
	fs.Int64Var(&c.storageRecords, "scale-storage-records", c.storageRecords, "scale: compare priced-output layouts on the output of the run of this size (0: not at all)")
	fs.IntVar(&c.lookups, "scale-lookups", c.lookups, "scale: contracts read one at a time per priced-output layout")
	fs.StringVar(&c.until, "scale-until", c.until, "scale: last stage to run (seed, load, run, export, verify): measure one stage at size without the rest")
}

// scaleSteps are the stages in order, verify last.
var scaleSteps = []string{"seed", "load", "run", "export", "verify"}

// validate rejects sizes the scenario cannot run.
func (c scaleConfig) validate() error {
	var errs []error
	if c.perContract < 1 {
		errs = append(errs, fmt.Errorf("-scale-records-per-contract %d: want at least 1", c.perContract))
	}
	for _, s := range []struct {
		flag string
		n    int64
		zero bool
	}{{"-scale-records", c.records, false}, {"-scale-baseline", c.baseline, true}} {
		switch {
		case s.n == 0 && s.zero:
		case s.n < 1:
			errs = append(errs, fmt.Errorf("%s %d: want a positive number of records", s.flag, s.n))
		case c.perContract >= 1 && s.n%int64(c.perContract) != 0:
			errs = append(errs, fmt.Errorf("%s %d: want a multiple of -scale-records-per-contract (%d)", s.flag, s.n, c.perContract))
		}
	}
	if c.storageRecords != 0 && c.storageRecords != c.records && c.storageRecords != c.baseline {
		errs = append(errs, fmt.Errorf("-scale-storage-records %d: want the size of one of the runs (%d or %d) or 0", c.storageRecords, c.baseline, c.records))
	}
	if !slices.Contains(scaleSteps, c.until) {
		errs = append(errs, fmt.Errorf("-scale-until %q: want one of %s", c.until, strings.Join(scaleSteps, ", ")))
	}
	if c.timeout <= 0 || c.lookups < 1 {
		errs = append(errs, fmt.Errorf("-scale-stage-timeout and -scale-lookups must be positive"))
	}
	return errors.Join(errs...)
}
