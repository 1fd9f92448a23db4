package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/internal/report/text"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/spf13/pflag"
)

// pricingStore is the store of the pricing partitions (kind pricer.Kind),
// the only task rows the CLI's commands read or change: partitions of
// other processors sharing the schema are not contracts.
func pricingStore(db *dbconn.DB, schemaName string) *partition.Store {
	return partition.NewStore(db, schemaName).Kind(pricer.Kind)
}

// statesHelp documents the states status reports.
const statesHelp = `States:
  pending      unowned, records waiting to be priced
  confirming   taken over from a worker that stopped heartbeating; the new
               owner confirms its claim over --confirm heartbeats before its
               first batch (0 records/s meanwhile)
  active       held by a live worker, records waiting
  caught_up    held by a live worker, nothing waiting (leader mode)
  stale        its owner stopped heartbeating; another worker takes it over
  backoff      a batch failed; retried after an exponential back-off
  quarantined  failed --max-attempts times; needs "worker retry CONTRACT"
  done         unowned, every record priced
  A contract split into segments (run --segment-records), which several
  workers price at once, is in the most pressing state of its own and its
  segments' (one quarantined makes it quarantined, one being priced makes
  it active); the SEGMENTS column counts those not caught up, and held.
  inconsistent an error: its checkpoint (or the records announced to the
               workers) lies beyond its stored records, so records were
               skipped or something other than the loader added work;
               "export --complete" refuses to export`

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON, watch bool
	var every, warnAfter, drainTarget time.Duration
	var loads report.LoadsQuery
	var filter report.Filter
	cmd := &cobra.Command{
		Use:   "status [--json | --watch]",
		Short: "Show every contract's owner, state and progress, and the live workers",
		Long: `status lists every contract with its state, owner, progress and last error,
then the totals and the live workers. --json prints the same as JSON with
stable field names; --watch redraws a live view that fits the terminal,
and keeps running through database outages ("database unreachable,
retrying").

Workers and their held counts include only live leases: a worker that
stopped heartbeating is not counted.

Then what holds back vacuum: the oldest transactions holding back the
xmin horizon on the server (sessions of any database, replication slots,
prepared transactions: pid, application, state, the query's first
characters with its literals hidden) and the dead row versions of baton's
tables. A transaction older than --horizon-warn-after (or an inactive
replication slot holding the horizon) prints a WARNING line; in --json,
horizon.warning is true. While it lasts, the dead row versions of the
task rows cannot be vacuumed and pricing slows down: end that session, or
run such reports on a standby.

--loads lists the newest loads; --load N shows load N and exits 5 when it
is not present, which is how to check a load that exited 6 (committed on
the primary, not confirmed by the standby) once the cluster is stable.

` + statesHelp + "\n\n" + clienv.ExitCodesHelp,
		Example: `  worker status
  worker status --json | jq '.totals'
  worker status --json | jq '.horizon.warning'
  worker status --watch --interval 2s
  worker status --state quarantined,backoff
  worker status --load 7   # is load 7 present? (exit 5 if not)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if watch && asJSON {
				return usageError("--watch and --json do not go together")
			}
			if watch && loads.Asked() {
				return usageError("--loads and --load do not go with --watch")
			}
			if err := filter.Validate(); err != nil {
				return usageError("--%v", err)
			}
			if !asJSON && !cmd.Flags().Changed("limit") {
				filter.Limit = listedByDefault
			}
			open := func() (*dbconn.DB, error) { return g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, true) }
			if watch {
				// A live view outlasts outages, one at start included.
				open = func() (*dbconn.DB, error) {
					return g.OpenWaiting(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, 24*time.Hour)
				}
			}
			db, err := open()
			if err != nil {
				if watch && cmd.Context().Err() != nil {
					return nil // interrupted while waiting
				}
				return err
			}
			defer db.Close()
			if watch {
				return text.Watch(cmd.Context(), g.stdout, g.Logger, every, func(ctx context.Context) (report.Status, error) {
					return report.Read(ctx, db, g.schema, warnAfter)
				})
			}
			s, err := report.Read(cmd.Context(), db, g.schema, warnAfter)
			if err != nil {
				return err
			}
			if err := report.ReadBacklog(cmd.Context(), db, g.schema, drainTarget, &s); err != nil {
				return err
			}
			if err := report.ReadLoads(cmd.Context(), db, g.schema, loads, &s); err != nil {
				return err
			}
			filter.Apply(&s)
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(s); err != nil {
					return err
				}
				return missingLoads(s.MissingLoads)
			}
			text.Print(g.stdout, s)
			return missingLoads(s.MissingLoads)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (stable field names) for scripts")
	cmd.Flags().BoolVar(&watch, "watch", false, "refresh a live view until interrupted")
	cmd.Flags().StringSliceVar(&filter.States, "state", nil, "list only contracts in these states (repeat or comma-separate: active,quarantined,...); totals stay the cluster's")
	cmd.Flags().IntVar(&filter.Limit, "limit", 0, fmt.Sprintf("list at most this many contracts (0: all; default %d without --json, all with it)", listedByDefault))
	cmd.Flags().BoolVar(&loads.Newest, "loads", false, fmt.Sprintf("also list the newest %d loads", report.LoadsShown))
	cmd.Flags().Int64SliceVar(&loads.IDs, "load", nil, "also show these loads (repeat or comma-separate ids); exit 5 if one is not present")
	cmd.Flags().DurationVar(&every, "interval", time.Second, "refresh interval with --watch")
	cmd.Flags().DurationVar(&warnAfter, "horizon-warn-after", horizon.WarnAfterDefault,
		"warn when a transaction has held back the xmin horizon (and so vacuum) this long")
	drainTargetFlag(cmd.Flags(), &drainTarget)
	cliflags.Positive(cmd.Flags(), "interval")
	cliflags.NonNegative(cmd.Flags(), "limit")
	cliflags.Positive(cmd.Flags(), "horizon-warn-after")
	return cmd
}

// listedByDefault is how many contracts plain status lists unless
// --limit says otherwise; --json lists every one unless --limit is given.
const listedByDefault = 100

// missingLoads is status's error when a load it was asked to check is
// not present (exit 5).
func missingLoads(ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = fmt.Sprint(id)
	}
	return fmt.Errorf("%s not present: %w (it never committed, or its commit did not survive a failover: load its files again)",
		noun.Count(int64(len(ids)), "load "+strings.Join(names, ", "), "loads "+strings.Join(names, ", ")), partition.ErrNotFound)
}

// drainTargetFlag adds --drain-target to f.
func drainTargetFlag(f *pflag.FlagSet, d *time.Duration) {
	f.DurationVar(d, "drain-target", backlog.DrainTargetDefault,
		"the time the backlog should drain within: workers needed (status, metrics) is computed for it")
	cliflags.Positive(f, "drain-target")
}
