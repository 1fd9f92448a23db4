package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/batonhq/baton/internal/dbconn"
	"github.com/batonhq/baton/pricer"
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
	Runs    []*scaleRun    `json:"runs"`
	Storage *storageResult `json:"storage,omitempty"`
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

// runScale runs the baseline and the large size end to end.
func (e *env) runScale(ctx context.Context, res *results) error {
	c := e.cfg.scale
	if err := c.validate(); err != nil {
		return err
	}
	sr := &scaleResult{PerContract: c.perContract, Workers: scaleWorkers}
	res.Scale = sr
	sizes := []int64{c.records}
	if c.baseline > 0 && c.baseline != c.records {
		sizes = []int64{c.baseline, c.records}
	}
	// Before anything is written: the large run's estimate at the
	// default bytes per record.
	if _, err := e.checkDisk(c.records, 0, 0); err != nil {
		return err
	}
	for i, n := range sizes {
		r := &scaleRun{Records: n, Contracts: int(n / int64(c.perContract))}
		var err error
		if i == 0 {
			r.Disk, err = e.checkDisk(n, 0, 0)
		} else {
			// With the bytes per record the baseline measured.
			b := sr.Runs[0]
			r.Disk, err = e.checkDisk(n, bytesPerRecord(b.DBBytes, b.Records), bytesPerRecord(b.CSVBytes, b.Records))
		}
		if err != nil {
			return err
		}
		sr.Runs = append(sr.Runs, r)
		if err := e.scaleRun(ctx, r, sr, res); err != nil {
			r.Error = err.Error()
			return fmt.Errorf("%d records: %w", n, err)
		}
		r.Complete = true
	}
	return nil
}

// scaleWorkers is the number of `worker run` processes.
const scaleWorkers = 2

// scaleRun seeds, loads, prices, exports and verifies r.Records records in
// a database of their own, then measures and drops it.
func (e *env) scaleRun(ctx context.Context, r *scaleRun, sr *scaleResult, res *results) (err error) {
	c := e.cfg.scale
	label := strconv.FormatInt(r.Records, 10)
	dir := filepath.Join(e.tmp, "scale-"+label)
	logDir := filepath.Join(e.tmp, "logs", "scale-"+label)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	defer os.RemoveAll(dir)
	name := "bench_scale_" + label + "_" + randomSuffix()
	if err := e.createDB(ctx, name, ""); err != nil {
		return err
	}
	defer e.dropDB(context.WithoutCancel(ctx), name)
	url := e.url(name)
	// run runs one worker command, named by its subcommand.
	run := func(args ...string) (stageProc, error) {
		return e.runStageProc(ctx, c.timeout, url, logDir, args[0], nil, res, args...)
	}
	if _, err := run("migrate"); err != nil {
		return err
	}
	log.Printf("scale: %d records (%d contracts × %d)", r.Records, r.Contracts, c.perContract)

	// seed: the CSV streamed to a file.
	p, err := run("seed", "--contracts", strconv.Itoa(r.Contracts),
		"--records-per-contract", strconv.Itoa(c.perContract), "--seed", strconv.FormatUint(e.cfg.seed, 10), "--dir", dir)
	if err != nil {
		return err
	}
	r.addStage("seed", p.Seconds, []stageProc{p})
	tiers, records := filepath.Join(dir, "tiers.csv"), filepath.Join(dir, "records.csv")
	if st, err := os.Stat(records); err == nil {
		r.CSVBytes = st.Size()
	}

	// load
	e.checkpoint(ctx)
	if p, err = run("load", "--tiers", tiers, "--records", records); err != nil {
		return err
	}
	r.addStage("load", p.Seconds, []stageProc{p})
	if err := os.Remove(records); err != nil {
		log.Printf("scale: removing %s: %v", records, err)
	}

	// run: two workers at default flags until every contract is done.
	e.checkpoint(ctx)
	var args [][]string
	for i := 1; i <= scaleWorkers; i++ {
		args = append(args, []string{"run", "--id", "w" + strconv.Itoa(i), "--log-format", "json", "--until-done"})
	}
	ps, secs, err := e.runStageProcs(ctx, c.timeout, url, logDir, res, args)
	if err != nil {
		return err
	}
	r.addStage("run", secs, ps)

	// export, to the bench: lines counted, bytes thrown away.
	e.checkpoint(ctx)
	var out lineCounter
	if p, err = e.runStageProc(ctx, c.timeout, url, logDir, "export", &out, res, "export", "--out", "-"); err != nil {
		return err
	}
	r.addStage("export", p.Seconds, []stageProc{p})
	r.ExportLines = max(0, out.lines-1) // the header
	if r.ExportLines != r.Records {
		return fmt.Errorf("worker export wrote %d records, want %d", r.ExportLines, r.Records)
	}

	db, err := dbconn.Open(url, dbconn.Options{MaxOpenConns: 4, ApplicationName: "bench-scale"})
	if err != nil {
		return err
	}
	defer db.Close()
	e.checkpoint(ctx)
	log.Printf("scale: %d records: verifying (pricer.Verify)", r.Records)
	t0 := time.Now()
	sum, err := pricer.Verify(ctx, db, "")
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
	if r.Tables, r.DBBytes, err = tableSizes(ctx, db, "baton"); err != nil {
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
	if c.storageRecords == r.Records && sr.Storage == nil {
		st, err := e.measureStorage(ctx, db, r.Records, c.lookups)
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
}

func (c *scaleConfig) flags(fs *flag.FlagSet) {
	*c = scaleConfig{records: 100_000_000, perContract: 1000, baseline: 1_000_000, timeout: 4 * time.Hour,
		storageRecords: 1_000_000, lookups: 100}
	fs.Int64Var(&c.records, "scale-records", c.records, "scale: records of the large run (needs about 300 bytes of disk per record)")
	fs.IntVar(&c.perContract, "scale-records-per-contract", c.perContract, "scale: records per contract")
	fs.Int64Var(&c.baseline, "scale-baseline", c.baseline, "scale: records of the baseline run the large one is compared with (0: none)")
	fs.DurationVar(&c.timeout, "scale-stage-timeout", c.timeout, "scale: longest a stage (seed, load, run, export) may take")
	fs.Int64Var(&c.storageRecords, "scale-storage-records", c.storageRecords, "scale: compare priced-output layouts on the output of the run of this size (0: not at all)")
	fs.IntVar(&c.lookups, "scale-lookups", c.lookups, "scale: contracts read one at a time per priced-output layout")
}

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
	if c.timeout <= 0 || c.lookups < 1 {
		errs = append(errs, fmt.Errorf("-scale-stage-timeout and -scale-lookups must be positive"))
	}
	return errors.Join(errs...)
}
