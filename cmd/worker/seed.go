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
		Args:  cobra.NoArgs,
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
