package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// The rerate scenario: what a re-rating costs against the first pricing
// of the same records, in the same run.
//
//  1. A tier change for a tenth of the contracts of 1,000 × 1,000
//     (worker load --tiers --reprice), re-priced by 2 `worker run
//     --until-done` processes, against those processes' first pricing of
//     all the records: records/s of each, and their ratio. The contracts
//     not named must keep generation 1 and their priced rows unchanged
//     (fingerprints before and after).
//  2. An amendment of one record in the middle of a 100,000-record
//     contract (worker load --records --amend): only the records from it
//     on are re-priced; the records re-priced and the time are reported.

// rerateConfig holds the scenario's knobs.
type rerateConfig struct {
	records, amendRecords, workers intFlag
}

func (c *rerateConfig) flags(fs *flag.FlagSet) {
	c.records.v, c.amendRecords.v, c.workers.v = 1_000_000, 100_000, 2
	fs.Var(&c.records, "rerate-records", "rerate: records of the tier-change data set, 1,000 contracts (default 1000000; -quick 100000)")
	fs.Var(&c.amendRecords, "rerate-amend-records", "rerate: records of the amended contract (default 100000; -quick 20000)")
	fs.Var(&c.workers, "rerate-workers", "rerate: worker processes (default 2)")
}

func (c *rerateConfig) applyQuick() {
	if !c.records.set {
		c.records.v = 100_000
	}
	if !c.amendRecords.set {
		c.amendRecords.v = 20_000
	}
}

// rerateRun is one timed pricing by the scenario's workers.
type rerateRun struct {
	Records int64   `json:"records"` // records priced (for a re-pricing: re-priced)
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"per_sec"`
}

// rerateResult is the rerate scenario's measurements.
type rerateResult struct {
	Workers   int    `json:"workers"`
	Seed      uint64 `json:"seed"`
	Contracts int    `json:"contracts"`
	Records   int64  `json:"records"`
	// First is the first pricing of every record; Reprice the re-pricing
	// of Retiered contracts after their tier change; Ratio Reprice's
	// records/s over First's.
	First     rerateRun `json:"first"`
	Retiered  int       `json:"retiered_contracts"`
	Reprice   rerateRun `json:"reprice"`
	Ratio     float64   `json:"ratio"`
	Untouched bool      `json:"untouched"` // contracts not named kept generation 1 and their priced rows
	Verified  bool      `json:"verified"`  // pricer.Verify after the re-pricing: no mismatch, all priced
	// The amendment: a contract of AmendContract records, the record at
	// AmendedSeq amended, AmendRepriced records re-priced.
	AmendContract int64     `json:"amend_contract_records"`
	AmendedSeq    int64     `json:"amended_seq"`
	AmendFirst    rerateRun `json:"amend_first"`
	Amend         rerateRun `json:"amend"`
	AmendVerified bool      `json:"amend_verified"`
	Error         string    `json:"error,omitempty"`
}

func (e *env) runRerate(ctx context.Context, res *results) error {
	c := e.cfg.rerate
	r := &rerateResult{Workers: c.workers.v, Seed: e.cfg.seed, Contracts: 1000}
	res.Rerate = r
	if err := e.rerateTiers(ctx, r, res); err != nil {
		r.Error = err.Error()
		return err
	}
	if err := e.rerateAmend(ctx, r, res); err != nil {
		r.Error = err.Error()
		return err
	}
	return nil
}

// rerateTiers measures the first pricing and the re-pricing of a tenth of
// the contracts after a tier change.
func (e *env) rerateTiers(ctx context.Context, r *rerateResult, res *results) error {
	per := max(1, e.cfg.rerate.records.v/r.Contracts)
	ds, err := e.seedTemplate(ctx, "rerate", r.Contracts, per)
	if err != nil {
		return err
	}
	r.Records = ds.Records
	name, db, err := e.fresh(ctx, ds.template, "rerate")
	if err != nil {
		return err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	if r.First, err = e.rerateWorkers(ctx, name, db, "first"); err != nil {
		return err
	}
	r.First.Records = r.Records

	// Every tenth contract gets new tiers.
	dir := filepath.Join(e.tmp, "rerate")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tiers := filepath.Join(dir, "tiers-new.csv")
	var b bytes.Buffer
	b.WriteString("contract_id,threshold_minor,discount_bp\n")
	var named []string
	for i := 0; i < r.Contracts; i += 10 {
		id := ds.opts.ContractID(i)
		named = append(named, id)
		fmt.Fprintf(&b, "%s,0,100\n%s,50000,750\n%s,500000,1500\n", id, id, id)
	}
	if err := os.WriteFile(tiers, b.Bytes(), 0o644); err != nil {
		return err
	}
	r.Retiered = len(named)
	untouchedBefore, err := untouchedDigest(ctx, db, named)
	if err != nil {
		return err
	}
	if _, err := e.workerCLI(ctx, name, "load", "--tiers", tiers, "--reprice", "--reason", "bench: tiers corrected"); err != nil {
		return err
	}
	res.addCommand("worker load --tiers tiers-new.csv --reprice --reason ...")
	if r.Reprice, err = e.rerateWorkers(ctx, name, db, "reprice"); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, `SELECT coalesce(sum(available - from_seq), 0) FROM baton.generations g
		JOIN baton.tasks t ON t.kind = 'pricing' AND t.partition_key = g.contract_id
		WHERE g.generation > 1 AND g.state = 'current'`).Scan(&r.Reprice.Records); err != nil {
		return fmt.Errorf("counting the records re-priced: %w", err)
	}
	r.Reprice.PerSec = float64(r.Reprice.Records) / r.Reprice.Seconds
	if r.First.PerSec > 0 {
		r.Ratio = r.Reprice.PerSec / r.First.PerSec
	}
	untouchedAfter, err := untouchedDigest(ctx, db, named)
	if err != nil {
		return err
	}
	var moved int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.tasks WHERE kind = 'pricing' AND segment_of IS NULL AND generation > 1`).Scan(&moved); err != nil {
		return err
	}
	r.Untouched = untouchedAfter == untouchedBefore && moved == len(named)
	sum, err := verifyPricing(ctx, db)
	if err != nil {
		return err
	}
	r.Verified = len(sum.Mismatches) == 0 && sum.Priced == sum.Records
	log.Printf("rerate: first pricing %.0f records/s; %d contracts re-priced after a tier change: %d records at %.0f records/s (%.2f×); others untouched: %v; verified: %v",
		r.First.PerSec, r.Retiered, r.Reprice.Records, r.Reprice.PerSec, r.Ratio, r.Untouched, r.Verified)
	return nil
}

// untouchedDigest fingerprints the priced rows of the contracts not named,
// with their generations.
func untouchedDigest(ctx context.Context, db *bun.DB, named []string) (string, error) {
	var d string
	err := db.QueryRowContext(ctx, `SELECT coalesce(md5(string_agg(md5(p.contract_id || ',' || p.seq || ',' || p.net_minor || ',' || p.discount_minor || ',' || t.generation),
		'' ORDER BY p.contract_id, p.seq)), '')
		FROM baton.priced p JOIN baton.tasks t ON t.kind = 'pricing' AND t.partition_key = p.contract_id
		WHERE p.contract_id <> ALL (?)`, pgdialect.Array(named)).Scan(&d)
	if err != nil {
		return "", fmt.Errorf("fingerprinting the contracts not re-priced: %w", err)
	}
	return d, nil
}

// rerateAmend measures the amendment of the middle record of one large
// contract: only its suffix is re-priced.
func (e *env) rerateAmend(ctx context.Context, r *rerateResult, res *results) error {
	n := e.cfg.rerate.amendRecords.v
	ds, err := e.seedTemplate(ctx, "rerate_amend", 1, n)
	if err != nil {
		return err
	}
	r.AmendContract = ds.Records
	name, db, err := e.fresh(ctx, ds.template, "rerate_amend")
	if err != nil {
		return err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	if r.AmendFirst, err = e.rerateWorkers(ctx, name, db, "amend-first"); err != nil {
		return err
	}
	r.AmendFirst.Records = ds.Records
	contract := ds.opts.ContractID(0)
	r.AmendedSeq = ds.Records / 2
	var id string
	var amount int64
	if err := db.QueryRowContext(ctx, `SELECT record_id, amount_minor FROM baton.records WHERE contract_id = ? AND seq = ?`,
		contract, r.AmendedSeq).Scan(&id, &amount); err != nil {
		return fmt.Errorf("reading the record to amend: %w", err)
	}
	file := filepath.Join(e.tmp, "rerate", "amend.csv")
	if err := os.WriteFile(file, fmt.Appendf(nil, "contract_id,record_id,amount_minor\n%s,%s,%d\n", contract, id, amount+1), 0o644); err != nil {
		return err
	}
	if _, err := e.workerCLI(ctx, name, "load", "--records", file, "--amend", "--reason", "bench: meter corrected"); err != nil {
		return err
	}
	res.addCommand("worker load --records amend.csv --amend --reason ...")
	if r.Amend, err = e.rerateWorkers(ctx, name, db, "amend"); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, `SELECT t.available - g.from_seq FROM baton.generations g
		JOIN baton.tasks t ON t.kind = 'pricing' AND t.partition_key = g.contract_id
		WHERE g.contract_id = ? AND g.state = 'current'`, contract).Scan(&r.Amend.Records); err != nil {
		return fmt.Errorf("counting the records re-priced: %w", err)
	}
	r.Amend.PerSec = float64(r.Amend.Records) / r.Amend.Seconds
	sum, err := verifyPricing(ctx, db)
	if err != nil {
		return err
	}
	r.AmendVerified = len(sum.Mismatches) == 0 && sum.Priced == sum.Records
	log.Printf("rerate: record %d of a %d-record contract amended: %d records re-priced in %.2f s (first pricing %.2f s); verified: %v",
		r.AmendedSeq, r.AmendContract, r.Amend.Records, r.Amend.Seconds, r.AmendFirst.Seconds, r.AmendVerified)
	return nil
}

// rerateWorkers runs the scenario's workers until done on database name
// and times them from the first start to the last exit.
func (e *env) rerateWorkers(ctx context.Context, name string, db *bun.DB, label string) (rerateRun, error) {
	var run rerateRun
	e.checkpoint(ctx)
	logDir := filepath.Join(e.tmp, "logs", "rerate-"+label+"-"+name)
	args := designBaton.workerArgs(0, nil, 0)
	start := time.Now()
	var ps []*proc
	for i := 1; i <= e.cfg.rerate.workers.v; i++ {
		p, err := e.startBaton(e.url(name), logDir, "w"+strconv.Itoa(i), args...)
		if err != nil {
			killAll(ps)
			return run, err
		}
		ps = append(ps, p)
	}
	if err := waitAll(ps, time.Hour); err != nil {
		return run, err
	}
	if err := failed(ps, nil); err != nil {
		return run, err
	}
	var last time.Time
	for _, p := range ps {
		if p.exited.After(last) {
			last = p.exited
		}
	}
	run.Seconds = last.Sub(start).Seconds()
	priced, _, err := pricingProgress(ctx, db)
	if err != nil {
		return run, err
	}
	run.Records = priced
	run.PerSec = float64(priced) / run.Seconds
	return run, nil
}

// workerCLI runs a worker subcommand on database name and returns its
// standard output.
func (e *env) workerCLI(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.workerBin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+e.url(name))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("worker %v: %w: %s", args, err, errb.String())
	}
	return out.String(), nil
}
