package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
)

// pricingStore is the store of the pricing partitions (kind pricer.Kind),
// the only task rows the CLI's commands read or change: partitions of
// other processors sharing the schema are not contracts.
func pricingStore(db *dbconn.DB, schemaName string) *partition.Store {
	return partition.NewStore(db, schemaName).Kind(pricer.Kind)
}

// The JSON shape of "worker status --json" (package report).
type (
	statusJSON    = report.Status
	partitionJSON = report.Contract
	horizonJSON   = report.Horizon
	totalsJSON    = report.Totals
	holderJSON    = report.Holder
)

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
	var loads loadsQuery
	var filter statusFilter
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

` + statesHelp + "\n\n" + exitCodesHelp,
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
			if watch && loads.asked() {
				return usageError("--loads and --load do not go with --watch")
			}
			if err := filter.validate(); err != nil {
				return err
			}
			if !asJSON && !cmd.Flags().Changed("limit") {
				filter.limit = listedByDefault
			}
			open := func() (*dbconn.DB, error) { return g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, true) }
			if watch {
				// A live view outlasts outages, one at start included.
				open = func() (*dbconn.DB, error) {
					return g.openWaiting(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, 24*time.Hour)
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
				return watchStatus(cmd.Context(), g, db, every, warnAfter)
			}
			s, err := report.Read(cmd.Context(), db, g.schema, warnAfter)
			if err != nil {
				return err
			}
			if err := readBacklog(cmd.Context(), db, g.schema, drainTarget, &s); err != nil {
				return err
			}
			if err := readLoads(cmd.Context(), db, g.schema, loads, &s); err != nil {
				return err
			}
			filter.apply(&s)
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(s); err != nil {
					return err
				}
				return missingLoads(s.MissingLoads)
			}
			printStatus(g.stdout, s)
			printLoads(g.stdout, s)
			return missingLoads(s.MissingLoads)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (stable field names) for scripts")
	cmd.Flags().BoolVar(&watch, "watch", false, "refresh a live view until interrupted")
	cmd.Flags().StringSliceVar(&filter.states, "state", nil, "list only contracts in these states (repeat or comma-separate: active,quarantined,...); totals stay the cluster's")
	cmd.Flags().IntVar(&filter.limit, "limit", 0, fmt.Sprintf("list at most this many contracts (0: all; default %d without --json, all with it)", listedByDefault))
	cmd.Flags().BoolVar(&loads.newest, "loads", false, fmt.Sprintf("also list the newest %d loads", loadsShown))
	cmd.Flags().Int64SliceVar(&loads.ids, "load", nil, "also show these loads (repeat or comma-separate ids); exit 5 if one is not present")
	cmd.Flags().DurationVar(&every, "interval", time.Second, "refresh interval with --watch")
	cmd.Flags().DurationVar(&warnAfter, "horizon-warn-after", horizon.WarnAfterDefault,
		"warn when a transaction has held back the xmin horizon (and so vacuum) this long")
	drainTargetFlag(cmd.Flags(), &drainTarget)
	positive(cmd.Flags(), "interval")
	nonNegative(cmd.Flags(), "limit")
	positive(cmd.Flags(), "horizon-warn-after")
	return cmd
}

// printStatus writes the plain status: a table of contracts, the totals
// by state, and the live workers.
func printStatus(w io.Writer, s statusJSON) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTRACT\tSTATE\tOWNER\tVERSION\tHEARTBEAT\tPROCESSED\tPENDING\tETA\tSEGMENTS\tATTEMPTS\tERROR")
	for _, p := range s.Partitions {
		owner, hb, errText := "-", "-", "-"
		if p.Owner != nil {
			owner = *p.Owner
		}
		if p.HeartbeatAgeMS != nil {
			hb = (time.Duration(*p.HeartbeatAgeMS) * time.Millisecond).Round(time.Millisecond).String() + " ago"
		}
		if p.Error != nil {
			errText = strings.Join(strings.Fields(*p.Error), " ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%d\t%s\n", p.ContractID, p.State, owner, p.Version, hb, p.Processed, p.Pending,
			etaText(p), segmentsText(p), p.Attempts, errText)
	}
	tw.Flush()
	if s.Unlisted > 0 {
		fmt.Fprintf(w, "… %d more not listed (--limit 0 lists all, --state narrows)\n", s.Unlisted)
	}
	fmt.Fprintf(w, "\n%d contracts, %d records priced, %d pending\n", s.Totals.Partitions, s.Totals.Processed, s.Totals.Pending)
	fmt.Fprintf(w, "by state: %s\n", byState(s.Totals.ByState))
	fmt.Fprintf(w, "\n%d live workers\n", len(s.Workers))
	if len(s.Workers) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKER\tHOST\tPID\tMODE\tWAKE\tHELD\tHEARTBEAT")
		for _, wk := range s.Workers {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s ago\n", wk.ID, wk.Host, wk.PID, wk.Mode, wk.Wake, wk.Held,
				(time.Duration(wk.HeartbeatAgeMS) * time.Millisecond).Round(time.Millisecond))
		}
		tw.Flush()
	}
	report.WritePaused(w, s.Paused)
	printBacklog(w, s.Backlog)
	printHorizon(w, s.Horizon)
}

// segmentsText is a contract's segments not caught up, for the status
// table: "-" for none, else how many and how many are held.
func segmentsText(p partitionJSON) string {
	if p.Segments == 0 {
		return "-"
	}
	return fmt.Sprintf("%d (%d held)", p.Segments, p.SegmentsHeld)
}

// printHorizon writes what holds back vacuum: a WARNING line first when
// the threshold is passed, then the oldest holders and the dead row
// versions of baton's tables.
func printHorizon(w io.Writer, h *horizonJSON) {
	if h == nil {
		return
	}
	fmt.Fprintln(w)
	if h.Warning {
		fmt.Fprintf(w, "WARNING: %s. Dead row versions of the task rows cannot be vacuumed meanwhile and pricing slows down: end that session (SELECT pg_terminate_backend(pid)) or run such reports on a standby\n", h.Reason)
	}
	if len(h.Holders) == 0 {
		fmt.Fprintln(w, "xmin horizon: nothing holds it back")
	} else {
		fmt.Fprintf(w, "xmin horizon held back by (oldest first; warning after %s):\n", time.Duration(h.WarnAfterMS)*time.Millisecond)
		for i, x := range h.Holders {
			if i == 3 {
				fmt.Fprintf(w, "  … and %d more (status --json lists them)\n", len(h.Holders)-3)
				break
			}
			age := "age unknown"
			if x.AgeMS != nil {
				age = "open " + (time.Duration(*x.AgeMS) * time.Millisecond).Round(time.Second).String()
			}
			fmt.Fprintf(w, "  %s, %d xids back: %s\n", age, x.XIDAge, x.Describe())
		}
	}
	if h.Hidden > 0 {
		fmt.Fprintf(w, "  %d sessions of other roles hold it too; grant pg_read_all_stats to see who\n", h.Hidden)
	}
	var parts []string
	for _, t := range h.Tables {
		if t.Dead > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t.Name, t.Dead))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "none")
	}
	fmt.Fprintf(w, "dead row versions: %d (%s)\n", h.DeadRows, strings.Join(parts, ", "))
}

// watchStatus redraws the live view until ctx ends. A failed read keeps the
// last view on screen under a "database unreachable, retrying" line and
// tries again at the next tick.
func watchStatus(ctx context.Context, g *globals, db *dbconn.DB, every, warnAfter time.Duration) error {
	view := newLiveView(g.stdout)
	view.screen = true
	if view.tty {
		fmt.Fprint(g.stdout, "\033[?25l\033[H\033[2J") // hide the cursor, clear the screen
		defer fmt.Fprint(g.stdout, "\033[?25h")
	}
	start := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last *statusJSON
	var downSince time.Time
	for {
		s, err := report.Read(ctx, db, g.schema, warnAfter)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if downSince.IsZero() {
				downSince = time.Now()
				if !view.tty {
					g.logger.Warn("database unreachable, retrying", "error", err.Error())
				}
			}
			view.alert = fmt.Sprintf("database unreachable, retrying (since %s)", downSince.Format("15:04:05"))
			if last != nil {
				view.draw(*last, last.Totals.Processed+last.Totals.Pending, time.Since(start))
			} else if view.tty {
				view.draw(statusJSON{Totals: totalsJSON{ByState: map[string]int{}}}, 0, time.Since(start))
			}
		default:
			if !downSince.IsZero() && !view.tty {
				g.logger.Info("database reachable again", "down_ms", time.Since(downSince).Milliseconds())
			}
			downSince, view.alert = time.Time{}, ""
			last = &s
			view.draw(s, s.Totals.Processed+s.Totals.Pending, time.Since(start))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
