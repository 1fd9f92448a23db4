package main

import (
	"context"
	"errors"
	"math"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/interrupt"
	"github.com/batonhq/baton/internal/progress"
	"github.com/batonhq/baton/pricing/ingest"
)

func newLoadCmd(g *globals) *cobra.Command {
	var opts ingest.Options
	var memoryMiB int64
	cmd := &cobra.Command{
		Use:   "load [--tiers FILE [--reprice]] [--records FILE [--amend]] [--preview] [--reason TEXT] [--skip-invalid --reject-file FILE]",
		Short: "Validate and load tiers and/or records (all or nothing by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.TiersPath == "" && opts.RecordsPath == "" {
				return usageError("give --tiers, --records or both")
			}
			if opts.SkipInvalid != (opts.RejectPath != "") {
				return usageError("--skip-invalid and --reject-file go together")
			}
			if opts.Reprice && opts.TiersPath == "" {
				return usageError("--reprice applies a tiers file: give --tiers")
			}
			if opts.Amend && opts.RecordsPath == "" {
				return usageError("--amend applies a records file: give --records")
			}
			if opts.Preview && !opts.Reprice && !opts.Amend {
				return usageError("--preview goes with --reprice or --amend")
			}
			if opts.Reason != "" && !opts.Reprice && !opts.Amend {
				return usageError("--reason goes with --reprice or --amend")
			}
			opts.StartedBy = clienv.Operator("load")
			for flag, path := range map[string]string{"--tiers": opts.TiersPath, "--records": opts.RecordsPath} {
				if err := cliflags.InputFile(flag, path); err != nil {
					return usageError("%v", err)
				}
			}
			if opts.MaxListed == 0 {
				opts.MaxListed = math.MaxInt // 0 lists every invalid row
			}
			db, err := g.open(cmd.Context(), dbconn.Options{ApplicationName: "baton-load", MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			opts.MemoryLimit = memoryMiB << 20
			ingest.LimitHeap(opts.MemoryLimit)
			p := progress.NewLoad(g.stderr, "loading", g.LogFormat)
			opts.ReadProgress = p.Reading
			g.OwnsDurability = true // a NotReplicatedError names the load
			rep, err := loadFiles(cmd.Context(), ingest.NewStore(db, g.schema), opts, p)
			var unconfirmed *ingest.NotReplicatedError
			if err != nil && !errors.As(err, &unconfirmed) {
				return err
			}
			rep.WriteSummary(g.stdout, opts)
			return err // nil, or committed but not confirmed by the standby (exit 6)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.TiersPath, "tiers", "", "tiers CSV (contract_id,threshold_minor,discount_bp)")
	f.StringVar(&opts.RecordsPath, "records", "", "records CSV (contract_id,record_id,amount_minor)")
	f.BoolVar(&opts.SkipInvalid, "skip-invalid", false, "load the valid rows and write the invalid ones to --reject-file")
	f.StringVar(&opts.RejectPath, "reject-file", "", "where --skip-invalid writes rejected rows with their reasons")
	f.BoolVar(&opts.Reprice, "reprice", false, "apply changed tier sets of contracts with priced records and re-price them")
	f.BoolVar(&opts.Amend, "amend", false, "a stored record id with another amount replaces the amount and re-prices from that record")
	f.StringVar(&opts.Reason, "reason", "", "why, recorded with the re-pricing (with --reprice or --amend)")
	f.BoolVar(&opts.Preview, "preview", false, "with --reprice or --amend: price the new generations as previews, current only once approved (worker generations approve)")
	f.BoolVar(&opts.ConfirmStandby, "confirm-standby", false, "exit 6 (committed, not confirmed) unless the commit waited for a synchronous standby; without it that is checked only when commits waited for one as the load began")
	f.IntVar(&opts.MaxListed, "max-errors", ingest.MaxListedDefault, "invalid rows listed in the error, 0 for all (all are counted either way)")
	cliflags.NonNegative(f, "max-errors")
	f.DurationVar(&opts.StatementTimeout, "statement-timeout", ingest.StatementTimeoutDefault, "longest statement of the load (0: no limit)")
	f.DurationVar(&opts.LockTimeout, "lock-timeout", ingest.LockTimeoutDefault, "longest wait for a row lock held by a worker (0: no limit); waiting for another load is not limited")
	f.DurationVar(&opts.IdleInTransactionTimeout, "idle-timeout", ingest.IdleInTransactionTimeoutDefault, "the server ends a load that pauses this long between statements (stalled, cut off), releasing its locks (0: no limit)")
	cliflags.NonNegative(f, "statement-timeout", "lock-timeout", "idle-timeout")
	f.Int64Var(&memoryMiB, "memory", ingest.MemoryLimitDefault>>20, "MiB the load may take for the records whatever the file's size (at least 1); more writes less to temporary files")
	cliflags.Positive(f, "memory")
	return cmd
}

// loadFiles runs a load showing its progress on p, which it ends; a load
// interrupted by a signal exits 130 (SIGINT) or 143 (SIGTERM).
func loadFiles(ctx context.Context, store *ingest.Store, opts ingest.Options, p *progress.Counter) (ingest.Report, error) {
	opts.Progress = p.Update
	rep, err := store.Load(ctx, opts)
	if errors.Is(err, ingest.ErrInterrupted) {
		p.End()
		return rep, clienv.Exit(interrupt.ExitCode(ctx), err)
	}
	p.Done()
	return rep, err
}
