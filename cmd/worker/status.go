package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/internal/report/text"
)

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON, watch bool
	var every time.Duration
	var q report.Query
	cmd := &cobra.Command{
		Use:   "status [--json | --watch]",
		Short: "Show every contract's owner, state and progress, and the live workers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if watch && asJSON {
				return usageError("--watch and --json do not go together")
			}
			if watch && q.Loads.Asked() {
				return usageError("--loads and --load do not go with --watch")
			}
			if err := q.Filter.Validate(); err != nil {
				return usageError("--%v", err)
			}
			if !asJSON && !cmd.Flags().Changed("limit") {
				q.Filter.Limit = listedByDefault
			}
			wait := time.Duration(0)
			if watch {
				wait = 24 * time.Hour // a live view outlasts outages, one at start included
			}
			db, err := g.OpenWaiting(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, wait)
			if err != nil {
				if watch && cmd.Context().Err() != nil {
					return nil // interrupted while waiting
				}
				return err
			}
			defer db.Close()
			if watch {
				return text.Watch(cmd.Context(), g.stdout, g.Logger, every, func(ctx context.Context) (report.Status, error) {
					return report.Read(ctx, db, g.schema, q.WarnAfter)
				})
			}
			s, err := report.ReadAll(cmd.Context(), db, g.schema, q)
			if err != nil {
				return err
			}
			if asJSON {
				if err := report.WriteJSON(g.stdout, s); err != nil {
					return err
				}
			} else {
				text.Print(g.stdout, s)
			}
			return s.MissingLoadsError()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (stable field names) for scripts")
	cmd.Flags().BoolVar(&watch, "watch", false, "refresh a live view until interrupted")
	cmd.Flags().StringSliceVar(&q.Filter.States, "state", nil, "list only contracts in these states (repeat or comma-separate: active,quarantined,...); totals stay the cluster's")
	cmd.Flags().IntVar(&q.Filter.Limit, "limit", 0, fmt.Sprintf("list at most this many contracts (0: all; default %d without --json, all with it)", listedByDefault))
	cmd.Flags().BoolVar(&q.Loads.Newest, "loads", false, fmt.Sprintf("also list the newest %d loads", report.LoadsShown))
	cmd.Flags().Int64SliceVar(&q.Loads.IDs, "load", nil, "also show these loads (repeat or comma-separate ids); exit 5 if one is not present")
	cmd.Flags().DurationVar(&every, "interval", time.Second, "refresh interval with --watch")
	cliflags.HorizonWarnAfter(cmd.Flags(), &q.WarnAfter)
	cliflags.DrainTarget(cmd.Flags(), &q.DrainTarget)
	cliflags.Positive(cmd.Flags(), "interval")
	cliflags.NonNegative(cmd.Flags(), "limit")
	return cmd
}

// listedByDefault is how many contracts plain status lists unless
// --limit says otherwise; --json lists every one unless --limit is given.
const listedByDefault = 100
