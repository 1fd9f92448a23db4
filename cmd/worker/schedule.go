package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/jobs"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/internal/report/text"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schedule"
)

// The JSON shape of "worker schedule list --json" is a stable interface:
// fields may be added, never renamed or removed.

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Manage scheduled jobs, run by every \"worker run\" once per due time across the farm",
		Example: `  worker schedule add nightly-verify --cron "0 3 * * *" --builtin verify
  worker schedule list`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newScheduleAddCmd(g), newScheduleListCmd(g), newScheduleRemoveCmd(g), newScheduleTriggerCmd(g),
		newScheduleDemoCmd(g))
	return cmd
}

func (g *globals) openForSchedule(ctx context.Context) (*dbconn.DB, error) {
	return g.open(ctx, dbconn.Options{ApplicationName: "baton-schedule", MaxOpenConns: 2}, true)
}

func newScheduleAddCmd(g *globals) *cobra.Command {
	var d schedule.Definition
	var mode, missed string
	cmd := &cobra.Command{
		Use:   "add NAME (--every DURATION | --cron \"EXPR\") [flags] (-- COMMAND [ARGS...] | --builtin NAME)",
		Short: "Add a scheduled job, or update the job of that name",
		Example: `  worker schedule add cleanup --every 10m -- /usr/local/bin/cleanup --older-than 7d
  worker schedule add nightly-verify --cron "0 3 * * *" --builtin verify`,
		Long: `Add a scheduled job, or update the job of that name.

The command runs with BATON_JOB, BATON_SLOT (the due time, RFC 3339 UTC, from
the database clock), BATON_FENCE, BATON_IDEMPOTENCY_KEY (job@slot) and
BATON_WORKER in its environment; its output goes to the worker's log and its
exit status is the run's result. Built-in jobs: verify (recomputes every
contract's totals in SQL and checks the priced output and checkpoints).

Changes the database: stores the job, replacing the definition of a job of
that name (a changed schedule restarts its slots from the next one). Every
"worker run" with --jobs then runs it.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash < 0 {
				dash = len(args)
			}
			if dash != 1 {
				return usageError("schedule add: want one NAME before --, got %d", dash)
			}
			d.Name, d.Command = args[0], args[dash:]
			d.Mode, d.Missed = schedule.Mode(mode), schedule.Missed(missed)
			if err := jobs.Check(d); err != nil {
				return usageError("%v", err)
			}
			db, err := g.openForSchedule(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			if err := schedule.NewStore(db, g.schema).Add(cmd.Context(), d); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "job %s: %s, mode %s, missed %s\n", d.Name, d.ScheduleString(), d.Mode, d.Missed)
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&d.Every, "every", 0, "run every DURATION, at least "+jobs.MinEvery.String()+" (slots are multiples of it since the Unix epoch, database clock)")
	f.StringVar(&d.Cron, "cron", "", "run at the times of a five-field cron expression, UTC (e.g. \"*/5 * * * *\")")
	f.StringVar(&mode, "mode", string(schedule.ModeLock), "lock: release after each run; expire: let the lease run out; leader: keep the job on one worker while it lives")
	f.StringVar(&missed, "missed", string(schedule.MissedSkip), "skip: run the latest missed slot once; catch-up: run every missed slot, in order")
	f.DurationVar(&d.LockAtMostFor, "lock-at-most-for", schedule.LockAtMostForDefault, "longest a run may hold the job; the command is then stopped (SIGTERM, then SIGKILL)")
	f.DurationVar(&d.LockAtLeastFor, "lock-at-least-for", 0, "shortest time between two runs' starts (0: no minimum)")
	f.StringVar(&d.Builtin, "builtin", "", "run a built-in job instead of a command: verify")
	cliflags.AtLeast(f, "every", jobs.MinEvery.String())
	cliflags.AtLeast(f, "lock-at-most-for", "1ms")
	cliflags.NonNegative(f, "lock-at-least-for")
	return cmd
}

func newScheduleListCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List scheduled jobs: state, owner, schedule, command, next and last runs",
		Example: `  worker schedule list`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := g.openForSchedule(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			list, err := schedule.NewStore(db, g.schema).List(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []schedule.Status{}
				}
				return report.WriteJSON(g.stdout, list)
			}
			return text.PrintJobs(g.stdout, list)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (with each job's whole command)")
	return cmd
}

func newScheduleRemoveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a scheduled job (a run in progress can no longer record its completion)",
		Long: `remove deletes a scheduled job; no worker runs it again.

Changes the database: deletes the job's row, with its state and run history.`,
		Example: `  worker schedule remove cleanup`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			db, err := g.openForSchedule(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			if err := schedule.NewStore(db, g.schema).Remove(cmd.Context(), args[0]); err != nil {
				return jobNotFound(args[0], err)
			}
			fmt.Fprintf(g.stdout, "job %s removed\n", args[0])
			return nil
		},
	}
}

func newScheduleTriggerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "trigger NAME",
		Short: "Ask for one extra run of a job now, beside its schedule",
		Long: `trigger asks for one extra run of a job now, beside its schedule; the next
worker to look runs it.

Changes the database: records the request on the job's row.`,
		Example: `  worker schedule trigger nightly-verify`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			db, err := g.openForSchedule(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			at, err := schedule.NewStore(db, g.schema).Trigger(cmd.Context(), args[0])
			if err != nil {
				return jobNotFound(args[0], err)
			}
			fmt.Fprintf(g.stdout, "job %s triggered: slot %s\n", args[0], at.Format(time.RFC3339Nano))
			return nil
		},
	}
}

// jobNotFound words a missing job for the command line (exit 5), and
// leaves other errors as they are.
func jobNotFound(name string, err error) error {
	if errors.Is(err, partition.ErrNotFound) {
		return clienv.Exit(clienv.ExitNotFound, fmt.Errorf("no such job %s (see worker schedule list)", name))
	}
	return err
}
