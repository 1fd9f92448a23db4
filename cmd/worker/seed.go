package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/progress"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/seed"
)

func newSeedCmd(g *globals) *cobra.Command {
	var o seed.Options
	var dir, shape string
	var load bool
	cmd := &cobra.Command{
		Use:   "seed --contracts N --records-per-contract M [--shape uniform|zipf:S|hot:F] [--seed S] [--dir DIR] [--load]",
		Short: "Generate deterministic synthetic tiers and records CSV (and optionally load them)",
		Long: `seed generates synthetic tiers and records: the same --seed gives the
same data. There are N × M records whatever the --shape: uniform gives
every contract M; zipf:S gives contract i a share proportional to
1/(i+1)^S (zipf:1.1: the largest of 1,000 contracts holds 18%); hot:F
gives one contract the fraction F of them and spreads the rest evenly.
Every contract has at least one record, and the contracts' records are
interleaved in the file.

Writes files: tiers.csv and records.csv in --dir, replacing files of those
names. Changes the database with --load: loads them as "worker load"
does, adding contracts (ids --prefix and a number), their tiers and
records.`,
		Example: `  worker seed --contracts 100 --records-per-contract 1000 --dir data
  worker seed --contracts 10 --records-per-contract 50 --seed 7 --load
  worker seed --contracts 1000 --records-per-contract 1000 --shape zipf:1.1
  worker seed --contracts 1000 --records-per-contract 1000 --shape hot:0.5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Shape, err = seed.ParseShape(shape); err != nil {
				// The error reads 'shape "TEXT": reason'.
				return usageError("--%v", err)
			}
			p := progress.New(g.stderr, "generating")
			tiers, records, err := seed.WriteFiles(dir, o, func(rows int64) { p.Update("records", rows) })
			p.Done()
			if err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, o.Summary(tiers, records))
			if !load {
				return nil
			}
			db, err := g.open(cmd.Context(), dbconn.Options{ApplicationName: "baton-load", MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			rep, err := loadFiles(cmd.Context(), ingest.NewStore(db, g.schema),
				ingest.Options{TiersPath: tiers, RecordsPath: records}, progress.New(g.stderr, "loading"))
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "loaded %d records for %d contracts in %s\n", rep.RecordsAccepted, o.Contracts, rep.Duration.Round(time.Millisecond))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Contracts, "contracts", 100, "number of contracts")
	f.IntVar(&o.RecordsPerContract, "records-per-contract", 1000, "records per contract, their mean with a --shape other than uniform (0: contracts and tiers only)")
	f.StringVar(&shape, "shape", "uniform", "how records are spread over contracts: uniform, zipf:S (S > 0, say zipf:1.1) or hot:F (0 < F < 1, say hot:0.5)")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed, any value (same seed, same data)")
	f.StringVar(&o.Prefix, "prefix", "c", "contract id prefix")
	f.StringVar(&dir, "dir", ".", "directory for tiers.csv and records.csv")
	f.BoolVar(&load, "load", false, "load the generated files into the database")
	cliflags.Positive(f, "contracts")
	cliflags.NonNegative(f, "records-per-contract")
	cliflags.AnyValue(f, "seed")
	return cmd
}
