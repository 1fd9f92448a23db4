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
		Args:  cobra.NoArgs,
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
		Args:  cobra.MinimumNArgs(1),
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
		Use:   "list",
		Short: "List scheduled jobs: state, owner, schedule, command, next and last runs",
		Args:  cobra.NoArgs,
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
		Args:  cobra.ExactArgs(1),
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
		Args:  cobra.ExactArgs(1),
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
