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

	"github.com/batonhq/baton/pricing/seed"
)

// The rerate scenario: what a re-rating costs against the first pricing
// of the same records, back to back in one database with the same worker
// processes.
//
//  1. The first pricing of 1,000,000 records over 200 contracts by 2
//     `worker run --until-done` processes (spread evenly, or by
//     -rerate-shape: with hot:0.9 one contract holds 90 % of them, and
//     each of its pricings is shared out in segments).
//  2. A tier change of every contract (worker load --tiers --reprice; of
//     every Nth with -rerate-retier-every), re-priced by the same
//     processes: records/s of the records re-priced, over the first
//     pricing's. The contracts not named must keep their generation and
//     their priced rows unchanged (fingerprints before and after).
//  3. An amendment of each contract's middle record (worker load --records
//     --amend): only the records from it on are re-priced; records/s of
//     those, over the first pricing's.
//  4. A preview of another tier change of every contract (worker load
//     --tiers --reprice --preview): records/s of its pricing over the
//     first pricing's, and the time of `worker generations approve`,
//     which makes every preview current.
//
// pricer.Verify must pass after each re-pricing.

// rerateConfig holds the scenario's knobs.
type rerateConfig struct {
	records, contracts, retierEvery, workers intFlag
	shape                                    string
}

func (c *rerateConfig) flags(fs *flag.FlagSet) {
	c.records.v, c.contracts.v, c.retierEvery.v, c.workers.v = 1_000_000, 200, 1, 2
	fs.Var(&c.records, "rerate-records", "rerate: records of the data set (default 1000000; -quick 100000)")
	fs.Var(&c.contracts, "rerate-contracts", "rerate: contracts of the data set (default 200)")
	fs.Var(&c.retierEvery, "rerate-retier-every", "rerate: the tier change names every Nth contract (default 1: all)")
	fs.Var(&c.workers, "rerate-workers", "rerate: worker processes (default 2)")
	fs.StringVar(&c.shape, "rerate-shape", "uniform", "rerate: how the records spread over the contracts, as worker seed --shape takes it (hot:0.9: one contract holds 90 %, re-priced in segments)")
}

func (c *rerateConfig) applyQuick() {
	if !c.records.set {
		c.records.v = 100_000
	}
}

// rerateRun is one timed pricing by the scenario's workers.
type rerateRun struct {
	Records int64   `json:"records"` // records priced (for a re-pricing: re-priced)
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"per_sec"`
	// LoadSeconds is the time of the load command that started a
	// re-pricing (process start included); not counted in Seconds.
	LoadSeconds float64 `json:"load_seconds,omitempty"`
}

// rerateResult is the rerate scenario's measurements.
type rerateResult struct {
	Workers   int    `json:"workers"`
	Seed      uint64 `json:"seed"`
	Contracts int    `json:"contracts"`
	Records   int64  `json:"records"`
	Shape     string `json:"shape"`
	// First is the first pricing of every record; Reprice the re-pricing
	// of Retiered contracts after their tier change; Ratio Reprice's
	// records/s over First's.
	First     rerateRun `json:"first"`
	Retiered  int       `json:"retiered_contracts"`
	Reprice   rerateRun `json:"reprice"`
	Ratio     float64   `json:"ratio"`
	Untouched bool      `json:"untouched"` // contracts not named kept their generation and their priced rows
	Verified  bool      `json:"verified"`  // pricer.Verify after the re-pricing: no mismatch, all priced
	// The amendment of each contract's middle record: Amend the re-pricing
	// of the records from it on, AmendRatio its records/s over First's.
	Amend         rerateRun `json:"amend"`
	AmendRatio    float64   `json:"amend_ratio"`
	AmendVerified bool      `json:"amend_verified"`
	// The preview of a tier change of every contract: Preview its pricing,
	// PreviewRatio its records/s over First's, ApproveSeconds the time of
	// the approval command (process start included), PreviewVerified
	// pricer.Verify once approved.
	Preview         rerateRun `json:"preview"`
	PreviewRatio    float64   `json:"preview_ratio"`
	ApproveSeconds  float64   `json:"approve_seconds"`
	PreviewVerified bool      `json:"preview_verified"`
	Error           string    `json:"error,omitempty"`
}

func (e *env) runRerate(ctx context.Context, res *results) error {
	c := e.cfg.rerate
	r := &rerateResult{Workers: c.workers.v, Seed: e.cfg.seed, Contracts: c.contracts.v}
	res.Rerate = r
	if err := e.rerate(ctx, r, res); err != nil {
		r.Error = err.Error()
		return err
	}
	return nil
}

// rerate prices the data set, re-prices it after a tier change and again
// after an amendment of each contract's middle record.
func (e *env) rerate(ctx context.Context, r *rerateResult, res *results) error {
	per := max(1, e.cfg.rerate.records.v/r.Contracts)
	shape, err := seed.ParseShape(e.cfg.rerate.shape)
	if err != nil {
		return fmt.Errorf("-rerate-shape: %w", err)
	}
	r.Shape = shape.String()
	ds, err := e.seedShapedTemplate(ctx, "rerate", r.Contracts, per, shape)
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
	dir := filepath.Join(e.tmp, "rerate")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := e.rerateTiers(ctx, r, res, ds, name, db, dir); err != nil {
		return err
	}
	if err := e.rerateAmend(ctx, r, res, name, db, dir); err != nil {
		return err
	}
	return e.reratePreview(ctx, r, res, ds, name, db, dir)
}

// rerateTiers changes the tiers of every retierEvery-th contract and
// measures their re-pricing.
func (e *env) rerateTiers(ctx context.Context, r *rerateResult, res *results, ds *dataset, name string, db *bun.DB, dir string) error {
	tiers := filepath.Join(dir, "tiers-new.csv")
	var b bytes.Buffer
	b.WriteString("contract_id,threshold_minor,discount_bp\n")
	var named []string
	for i := 0; i < r.Contracts; i += max(1, e.cfg.rerate.retierEvery.v) {
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
	since, err := rerateStart(ctx, db)
	if err != nil {
		return err
	}
	loadSeconds, err := e.timedCLI(ctx, name, "load", "--tiers", tiers, "--reprice", "--reason", "bench: tiers corrected")
	if err != nil {
		return err
	}
	res.addCommand("worker load --tiers tiers-new.csv --reprice --reason ...")
	if r.Reprice, r.Verified, err = e.rerateRepricing(ctx, name, db, "reprice", since); err != nil {
		return err
	}
	r.Reprice.LoadSeconds = loadSeconds
	r.Ratio = r.Reprice.PerSec / r.First.PerSec
	untouchedAfter, err := untouchedDigest(ctx, db, named)
	if err != nil {
		return err
	}
	var moved int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.tasks WHERE kind = 'pricing' AND segment_of IS NULL AND generation > 1`).Scan(&moved); err != nil {
		return err
	}
	r.Untouched = untouchedAfter == untouchedBefore && moved == len(named)
	log.Printf("rerate: first pricing %.0f records/s; %d contracts re-priced after a tier change (load %.2f s): %d records at %.0f records/s (%.2f×); others untouched: %v; verified: %v",
		r.First.PerSec, r.Retiered, r.Reprice.LoadSeconds, r.Reprice.Records, r.Reprice.PerSec, r.Ratio, r.Untouched, r.Verified)
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

// rerateAmend amends the middle record of each contract (its amount + 1)
// and measures the re-pricing of the records from it on.
func (e *env) rerateAmend(ctx context.Context, r *rerateResult, res *results, name string, db *bun.DB, dir string) error {
	rows, err := db.QueryContext(ctx, `SELECT r.contract_id, r.record_id, r.amount_minor FROM baton.tasks t
		JOIN baton.records r ON r.contract_id = t.partition_key AND r.seq = greatest(1, t.available / 2)
		WHERE t.kind = 'pricing' AND t.segment_of IS NULL ORDER BY r.contract_id`)
	if err != nil {
		return fmt.Errorf("reading the records to amend: %w", err)
	}
	var b bytes.Buffer
	b.WriteString("contract_id,record_id,amount_minor\n")
	for rows.Next() {
		var contract, id string
		var amount int64
		if err := rows.Scan(&contract, &id, &amount); err != nil {
			rows.Close()
			return fmt.Errorf("reading the records to amend: %w", err)
		}
		fmt.Fprintf(&b, "%s,%s,%d\n", contract, id, amount+1)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the records to amend: %w", err)
	}
	file := filepath.Join(dir, "amend.csv")
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		return err
	}
	since, err := rerateStart(ctx, db)
	if err != nil {
		return err
	}
	loadSeconds, err := e.timedCLI(ctx, name, "load", "--records", file, "--amend", "--reason", "bench: meter corrected")
	if err != nil {
		return err
	}
	res.addCommand("worker load --records amend.csv --amend --reason ...")
	if r.Amend, r.AmendVerified, err = e.rerateRepricing(ctx, name, db, "amend", since); err != nil {
		return err
	}
	r.Amend.LoadSeconds = loadSeconds
	r.AmendRatio = r.Amend.PerSec / r.First.PerSec
	log.Printf("rerate: each contract's middle record amended (load %.2f s): %d records re-priced at %.0f records/s (%.2f× the first pricing); verified: %v",
		r.Amend.LoadSeconds, r.Amend.Records, r.Amend.PerSec, r.AmendRatio, r.AmendVerified)
	return nil
}

// reratePreview previews another tier change of every contract, measures
// the preview's pricing and then the approval of every preview.
func (e *env) reratePreview(ctx context.Context, r *rerateResult, res *results, ds *dataset, name string, db *bun.DB, dir string) error {
	tiers := filepath.Join(dir, "tiers-preview.csv")
	var b bytes.Buffer
	b.WriteString("contract_id,threshold_minor,discount_bp\n")
	for i := 0; i < r.Contracts; i++ {
		id := ds.opts.ContractID(i)
		fmt.Fprintf(&b, "%s,0,50\n%s,50000,500\n%s,500000,1000\n", id, id, id)
	}
	if err := os.WriteFile(tiers, b.Bytes(), 0o644); err != nil {
		return err
	}
	since, err := rerateStart(ctx, db)
	if err != nil {
		return err
	}
	loadSeconds, err := e.timedCLI(ctx, name, "load", "--tiers", tiers, "--reprice", "--preview", "--reason", "bench: what if")
	if err != nil {
		return err
	}
	res.addCommand("worker load --tiers tiers-preview.csv --reprice --preview --reason ...")
	if r.Preview, err = e.rerateWorkers(ctx, name, db, "preview"); err != nil {
		return err
	}
	r.Preview.LoadSeconds = loadSeconds
	if err := db.QueryRowContext(ctx, `SELECT coalesce(sum(t.available - g.from_seq), 0) FROM baton.generations g
		JOIN baton.tasks t ON t.kind = 'pricing' AND t.segment_of IS NULL AND t.partition_key = g.contract_id
		WHERE g.state = 'preview' AND g.started_at >= ?`, since).Scan(&r.Preview.Records); err != nil {
		return fmt.Errorf("counting the records previewed: %w", err)
	}
	r.Preview.PerSec = float64(r.Preview.Records) / r.Preview.Seconds
	r.PreviewRatio = r.Preview.PerSec / r.First.PerSec
	start := time.Now()
	if _, err := e.workerCLI(ctx, name, "generations", "approve"); err != nil {
		return err
	}
	r.ApproveSeconds = time.Since(start).Seconds()
	res.addCommand("worker generations approve")
	sum, err := verifyPricing(ctx, db)
	if err != nil {
		return err
	}
	r.PreviewVerified = len(sum.Mismatches) == 0 && sum.Priced == sum.Records
	log.Printf("rerate: preview of a tier change of every contract (load %.2f s): %d records at %.0f records/s (%.2f× the first pricing); approve took %.2f s; verified: %v",
		r.Preview.LoadSeconds, r.Preview.Records, r.Preview.PerSec, r.PreviewRatio, r.ApproveSeconds, r.PreviewVerified)
	return nil
}

// rerateStart is the database clock before a re-rating's load.
func rerateStart(ctx context.Context, db *bun.DB) (time.Time, error) {
	var t time.Time
	if err := db.QueryRowContext(ctx, `SELECT now()`).Scan(&t); err != nil {
		return t, fmt.Errorf("reading the database clock: %w", err)
	}
	return t, nil
}

// rerateRepricing runs the workers over the generations started since
// since and counts the records they re-priced (each such generation's
// records after its from_seq), then verifies the whole output.
func (e *env) rerateRepricing(ctx context.Context, name string, db *bun.DB, label string, since time.Time) (rerateRun, bool, error) {
	run, err := e.rerateWorkers(ctx, name, db, label)
	if err != nil {
		return run, false, err
	}
	if err := db.QueryRowContext(ctx, `SELECT coalesce(sum(t.available - g.from_seq), 0) FROM baton.generations g
		JOIN baton.contracts c ON c.contract_id = g.contract_id AND c.current_generation = g.generation
		JOIN baton.tasks t ON t.kind = 'pricing' AND t.segment_of IS NULL AND t.partition_key = g.contract_id
		WHERE g.generation > 1 AND g.started_at >= ?`, since).Scan(&run.Records); err != nil {
		return run, false, fmt.Errorf("counting the records re-priced: %w", err)
	}
	run.PerSec = float64(run.Records) / run.Seconds
	sum, err := verifyPricing(ctx, db)
	if err != nil {
		return run, false, err
	}
	return run, len(sum.Mismatches) == 0 && sum.Priced == sum.Records, nil
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

// timedCLI runs a worker subcommand on database name, as workerCLI
// does, and returns how long it took in seconds.
func (e *env) timedCLI(ctx context.Context, name string, args ...string) (float64, error) {
	start := time.Now()
	_, err := e.workerCLI(ctx, name, args...)
	return time.Since(start).Seconds(), err
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
