package main

import (
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/internal/report/text"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/rerate"
)

func newPruneCmd(g *globals) *cobra.Command {
	var loads []int64
	var olderThan, genOlderThan time.Duration
	var batch int
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "prune (--load N [N...] | --older-than DURATION | --generations-older-than DURATION) [--dry-run] [--batch-size N] [--json]",
		Short: "Remove finished loads' records and priced output, in small transactions, while workers run",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if !cmd.Flags().Changed("load") {
					return usageError("unexpected argument %q: load ids follow --load", a)
				}
				id, err := strconv.ParseInt(a, 10, 64)
				if err != nil || id < 1 {
					return usageError("load id %q: must be a positive integer", a)
				}
				loads = append(loads, id)
			}
			for _, id := range loads {
				if id < 1 {
					return usageError("load id %d: must be a positive integer", id)
				}
			}
			if cmd.Flags().Changed("generations-older-than") {
				if len(loads) > 0 || cmd.Flags().Changed("older-than") {
					return usageError("--generations-older-than goes alone (not with --load or --older-than)")
				}
				return pruneGenerations(cmd, g, genOlderThan, asJSON, dryRun)
			}
			switch {
			case len(loads) == 0 && !cmd.Flags().Changed("older-than"):
				return usageError("say what to prune: --load N [N...] or --older-than DURATION")
			case len(loads) > 0 && cmd.Flags().Changed("older-than"):
				return usageError("--load and --older-than do not go together")
			}
			db, err := g.open(cmd.Context(), dbconn.Options{ApplicationName: "baton-prune", MaxOpenConns: 2,
				LockTimeout: 10 * time.Second, StatementTimeout: 10 * time.Minute, IdleInTransactionTimeout: 10 * time.Second}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			out, err := pricer.NewStore(db, g.schema).Prune(cmd.Context(), pricer.PruneConfig{BatchRecords: batch, DryRun: dryRun,
				OnBatch: func(load, records int64, took time.Duration) {
					g.Logger.Debug("prune batch", "event", "prune_batch", "load_id", load, "records", records, "took_ms", took.Milliseconds())
				}}, loads, olderThan)
			if err != nil {
				return err
			}
			if asJSON {
				if err := report.WriteJSON(g.stdout, out); err != nil {
					return err
				}
			} else {
				out.WriteText(g.stdout)
			}
			return out.Err()
		},
	}
	f := cmd.Flags()
	f.Int64SliceVar(&loads, "load", nil, "ids of the loads to prune (repeat, separate with commas, or list them after the flag)")
	f.DurationVar(&olderThan, "older-than", 0, "prune every load that finished longer ago than this and is not pruned yet (e.g. 720h)")
	f.DurationVar(&genOlderThan, "generations-older-than", 0, "instead, remove the superseded and abandoned generations of re-priced contracts replaced longer ago than this (e.g. 2160h; 0: every one)")
	f.IntVar(&batch, "batch-size", pricer.PruneBatchRecordsDefault, "about the most records (with their priced rows) one transaction removes: whole chunks of up to 1,024")
	f.BoolVar(&dryRun, "dry-run", false, "only report what would be removed")
	f.BoolVar(&asJSON, "json", false, "print JSON (stable field names) for scripts")
	cliflags.Positive(f, "older-than", "batch-size")
	cliflags.NonNegative(f, "generations-older-than")
	cliflags.AnyValue(f, "load")
	return cmd
}

// pruneGenerations is "worker prune --generations-older-than".
func pruneGenerations(cmd *cobra.Command, g *globals, olderThan time.Duration, asJSON, dryRun bool) error {
	db, err := g.open(cmd.Context(), rerateConn("prune"), true)
	if err != nil {
		return err
	}
	defer db.Close()
	prune := rerate.NewStore(db, g.schema).Prune
	if dryRun {
		prune = rerate.NewStore(db, g.schema).PrunePlan
	}
	p, err := prune(cmd.Context(), olderThan)
	if err != nil {
		return err
	}
	if asJSON {
		return report.WriteJSON(g.stdout, p)
	}
	text.WritePruned(g.stdout, p, olderThan, dryRun)
	return nil
}
