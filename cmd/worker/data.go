package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/export"
	"github.com/batonhq/baton/ingest"
	"github.com/batonhq/baton/internal/dbconn"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
	"github.com/batonhq/baton/seed"
)

func newMigrateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending schema migrations (safe to run from many processes at once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, false)
			if err != nil {
				return err
			}
			defer db.Close()
			applied, err := schema.Migrate(cmd.Context(), db)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintln(g.stdout, "schema is up to date")
			}
			for _, m := range applied {
				fmt.Fprintln(g.stdout, "applied migration", m)
			}
			return nil
		},
	}
}

func newLoadCmd(g *globals) *cobra.Command {
	var opts ingest.Options
	cmd := &cobra.Command{
		Use:   "load [--tiers FILE] [--records FILE] [--skip-invalid --reject-file FILE]",
		Short: "Validate and load tiers and/or records (all or nothing by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.TiersPath == "" && opts.RecordsPath == "" {
				return usageError("give --tiers, --records or both")
			}
			if opts.SkipInvalid != (opts.RejectPath != "") {
				return usageError("--skip-invalid and --reject-file go together")
			}
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			p := newProgress(g.stderr, "loading")
			opts.Progress = p.update
			rep, err := ingest.Load(cmd.Context(), db, opts)
			p.done()
			if err != nil {
				return err
			}
			rate := float64(rep.RecordsAccepted+rep.RecordsRedelivered) / rep.Duration.Seconds()
			fmt.Fprintf(g.stdout, "load %d: %d tier rows, %d contracts created, %d records accepted, %d re-delivered (skipped), %d rejected in %s (%.0f records/s)\n",
				rep.LoadID, rep.TierRows, rep.ContractsCreated, rep.RecordsAccepted, rep.RecordsRedelivered,
				rep.RowsRejected, rep.Duration.Round(time.Millisecond), rate)
			if rep.RowsRejected > 0 {
				fmt.Fprintf(g.stdout, "rejected rows and their reasons: %s\n", opts.RejectPath)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.TiersPath, "tiers", "", "tiers CSV (contract_id,threshold_minor,discount_bp)")
	f.StringVar(&opts.RecordsPath, "records", "", "records CSV (contract_id,record_id,amount_minor)")
	f.BoolVar(&opts.SkipInvalid, "skip-invalid", false, "load the valid rows and write the invalid ones to --reject-file")
	f.StringVar(&opts.RejectPath, "reject-file", "", "where --skip-invalid writes rejected rows with their reasons")
	f.IntVar(&opts.MaxListed, "max-errors", ingest.MaxListedDefault, "invalid rows listed in the error (all are counted)")
	return cmd
}

func newExportCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "export --out FILE",
		Short: "Write priced records as CSV, ordered by contract id (byte order) then acceptance order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageError("--out is required (use - for standard output)")
			}
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			if out == "-" {
				w := bufio.NewWriterSize(g.stdout, 1<<16)
				if _, err := export.Write(cmd.Context(), db, w); err != nil {
					return err
				}
				return w.Flush()
			}
			// Write to a temporary file and rename, so a failed export never
			// leaves a truncated file under the requested name.
			tmp, err := os.CreateTemp(filepath.Dir(out), ".export-*")
			if err != nil {
				return fmt.Errorf("creating %s: %w", out, err)
			}
			defer os.Remove(tmp.Name())
			w := bufio.NewWriterSize(tmp, 1<<16)
			n, err := export.Write(cmd.Context(), db, w)
			if err == nil {
				err = w.Flush()
			}
			if err == nil {
				err = tmp.Close()
			} else {
				tmp.Close()
			}
			if err != nil {
				return fmt.Errorf("exporting to %s: %w", out, err)
			}
			if err := os.Rename(tmp.Name(), out); err != nil {
				return fmt.Errorf("exporting to %s: %w", out, err)
			}
			fmt.Fprintf(g.stderr, "exported %d priced records to %s\n", n, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "output file, or - for standard output")
	return cmd
}

func newRetryCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "retry CONTRACT...",
		Short: "Re-enable quarantined (or backing-off) contracts",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			store := partition.NewStore(db)
			for _, c := range args {
				changed, err := store.Retry(cmd.Context(), c)
				if err != nil {
					return err
				}
				if changed {
					fmt.Fprintf(g.stdout, "%s: re-enabled\n", c)
				} else {
					fmt.Fprintf(g.stdout, "%s: not failed, nothing to do\n", c)
				}
			}
			return nil
		},
	}
}

func newSeedCmd(g *globals) *cobra.Command {
	var o seed.Options
	var dir string
	var load bool
	cmd := &cobra.Command{
		Use:   "seed --contracts N --records-per-contract M [--seed S] [--dir DIR] [--load]",
		Short: "Generate deterministic synthetic tiers and records CSV (and optionally load them)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Contracts < 1 || o.RecordsPerContract < 0 {
				return usageError("--contracts must be ≥ 1 and --records-per-contract ≥ 0")
			}
			tiers, records, err := writeSeed(dir, o, newProgress(g.stderr, "generating"))
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "wrote %s and %s (%d contracts × %d records, seed %d)\n",
				tiers, records, o.Contracts, o.RecordsPerContract, o.Seed)
			if !load {
				return nil
			}
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			p := newProgress(g.stderr, "loading")
			rep, err := ingest.Load(cmd.Context(), db, ingest.Options{TiersPath: tiers, RecordsPath: records, Progress: p.update})
			p.done()
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "loaded %d records for %d contracts in %s\n", rep.RecordsAccepted, o.Contracts, rep.Duration.Round(time.Millisecond))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Contracts, "contracts", 100, "number of contracts")
	f.IntVar(&o.RecordsPerContract, "records-per-contract", 1000, "records per contract")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed (same seed, same data)")
	f.StringVar(&o.Prefix, "prefix", "c", "contract id prefix")
	f.StringVar(&dir, "dir", ".", "directory for tiers.csv and records.csv")
	f.BoolVar(&load, "load", false, "load the generated files into the database")
	return cmd
}

func writeSeed(dir string, o seed.Options, p *progress) (tiersPath, recordsPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	tiersPath, recordsPath = filepath.Join(dir, "tiers.csv"), filepath.Join(dir, "records.csv")
	write := func(path string, fn func(*os.File) error) error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return f.Close()
	}
	if err := write(tiersPath, func(f *os.File) error { return seed.WriteTiers(f, o) }); err != nil {
		return "", "", err
	}
	err = write(recordsPath, func(f *os.File) error {
		return seed.WriteRecords(f, o, func(rows int64) { p.update("records", rows) })
	})
	p.done()
	return tiersPath, recordsPath, err
}
