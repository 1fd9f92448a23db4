package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/seed"
)

// dataset is a seeded data set loaded into a template database.
type dataset struct {
	Name        string  `json:"name"`
	Contracts   int     `json:"contracts"`
	PerContract int     `json:"records_per_contract"`
	Records     int64   `json:"records"`
	Seed        uint64  `json:"seed"`
	LoadSeconds float64 `json:"load_s"` // ingest.Load (baton's COPY loader) into the template
	// CopySeconds is psql \copy of the same records file into a plain
	// table (no keys) of the same database, right after the load.
	CopySeconds float64 `json:"psql_copy_s,omitempty"`
	template    string
	opts        seed.Options
}

// seedTemplate generates the seed CSV files and loads them with baton's
// loader into a template database, once per name.
func (e *env) seedTemplate(ctx context.Context, name string, contracts, perContract int) (*dataset, error) {
	return e.seedShapedTemplate(ctx, name, contracts, perContract, seed.Shape{})
}

// seedShapedTemplate is seedTemplate with the records spread over the
// contracts by shape (the zero Shape: uniform).
func (e *env) seedShapedTemplate(ctx context.Context, name string, contracts, perContract int, shape seed.Shape) (*dataset, error) {
	ds := &dataset{Name: name, Contracts: contracts, PerContract: perContract, Seed: e.cfg.seed,
		opts: seed.Options{Contracts: contracts, RecordsPerContract: perContract, Seed: e.cfg.seed, Prefix: "c", Shape: shape}}
	tplName := fmt.Sprintf("%s_%dx%d_s%d", name, contracts, perContract, e.cfg.seed)
	if shape.Kind != seed.Uniform {
		tplName += "_" + shapeSlug(shape)
	}
	tpl, err := e.template(ctx, tplName, func(ctx context.Context, db *bun.DB) error {
		dir := filepath.Join(e.tmp, "data-"+name)
		tiers, records, err := writeSeed(dir, ds.opts)
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		log.Printf("loading %s: %d contracts × %d records", name, contracts, perContract)
		rep, err := loadPricing(ctx, db, ingest.Options{TiersPath: tiers, RecordsPath: records})
		if err != nil {
			return fmt.Errorf("loading %s: %w", name, err)
		}
		ds.LoadSeconds = rep.Duration.Seconds()
		if ds.CopySeconds, err = e.psqlCopy(ctx, db, records); err != nil {
			log.Printf("psql \\copy baseline: %v", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ds.template = tpl
	ds.Records = ds.opts.Records()
	return ds, nil
}

func writeSeed(dir string, o seed.Options) (tiersPath, recordsPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	tiersPath, recordsPath = filepath.Join(dir, "tiers.csv"), filepath.Join(dir, "records.csv")
	if err := writeFile(tiersPath, func(w *bufio.Writer) error { return seed.WriteTiers(w, o) }); err != nil {
		return "", "", err
	}
	if err := writeFile(recordsPath, func(w *bufio.Writer) error { return seed.WriteRecords(w, o, nil) }); err != nil {
		return "", "", err
	}
	return tiersPath, recordsPath, nil
}

func writeFile(path string, fn func(*bufio.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	if err := fn(w); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// producer keeps contracts busy while workers run: whenever fewer than
// lowWater records are pending it loads chunk more, spread over every
// contract, through baton's loader (safe while workers run).
type producer struct {
	e        *env
	db       *bun.DB
	opts     seed.Options
	lowWater int64
	chunk    int
	rng      *rand.Rand
	n        int
	Loads    int     `json:"loads"`
	Records  int64   `json:"records"`
	Seconds  float64 `json:"load_s"`
}

func (p *producer) run(ctx context.Context) { feedWhileLow(ctx, p.db, p.lowWater, "producer", p.load) }

// feedWhileLow calls load every time fewer than lowWater items are pending
// (every pending item, a split contract's segments included), checking
// four times a second until ctx ends.
func feedWhileLow(ctx context.Context, db *bun.DB, lowWater int64, what string, load func(context.Context) error) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var pending int64
		if err := db.QueryRowContext(ctx, `SELECT coalesce(sum(available - position), 0) FROM baton.tasks`).Scan(&pending); err != nil {
			continue
		}
		if pending >= lowWater {
			continue
		}
		if err := load(ctx); err != nil && ctx.Err() == nil {
			log.Printf("%s: %v", what, err)
		}
	}
}

func (p *producer) load(ctx context.Context) error {
	p.n++
	path := filepath.Join(p.e.tmp, fmt.Sprintf("produce-%d.csv", p.n))
	defer os.Remove(path)
	perContract := max(1, p.chunk/p.opts.Contracts)
	err := writeFile(path, func(w *bufio.Writer) error {
		w.WriteString("contract_id,record_id,amount_minor\n")
		var buf []byte
		for j := range perContract {
			for i := range p.opts.Contracts {
				buf = appendProduced(buf[:0], p.opts.ContractID(i), "p", p.n, j, p.rng)
				if _, err := w.Write(buf); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	rep, err := loadPricing(ctx, p.db, ingest.Options{RecordsPath: path})
	if err != nil {
		return fmt.Errorf("loading produced records: %w", err)
	}
	p.Loads++
	p.Records += rep.RecordsAccepted
	p.Seconds += rep.Duration.Seconds()
	return nil
}

// psqlCopy times psql's \copy of a records file into a plain table of the
// same shape (no keys, no checks) in db, then drops the table: the loader's
// baseline.
func (e *env) psqlCopy(ctx context.Context, db *bun.DB, records string) (float64, error) {
	bindir, err := pglocal.BinDir()
	if err != nil {
		return 0, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE copy_baseline (contract_id text, record_id text, amount_minor bigint)`); err != nil {
		return 0, err
	}
	defer db.ExecContext(ctx, `DROP TABLE IF EXISTS copy_baseline`)
	var name string
	if err := db.QueryRowContext(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		return 0, err
	}
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, filepath.Join(bindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", e.url(name),
		"-c", `\copy copy_baseline FROM '`+strings.ReplaceAll(records, "'", "''")+`' WITH (FORMAT csv, HEADER true)`).CombinedOutput()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("psql \\copy: %w: %s", err, out)
	}
	log.Printf("psql \\copy of %s: %.1f s", filepath.Base(records), d.Seconds())
	return d.Seconds(), nil
}

// appendProduced appends a produced record's CSV line to buf: the
// contract, record id <tag><load>-<j> (unique per contract across loads)
// and an amount drawn from rng.
func appendProduced(buf []byte, contract, tag string, load, j int, rng *rand.Rand) []byte {
	buf = append(buf, contract...)
	buf = append(buf, ',')
	buf = append(buf, tag...)
	buf = strconv.AppendInt(buf, int64(load), 10)
	buf = append(buf, '-')
	buf = strconv.AppendInt(buf, int64(j), 10)
	buf = append(buf, ',')
	buf = strconv.AppendInt(buf, 1+rng.Int64N(100_000), 10)
	return append(buf, '\n')
}
