package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton/dbconn"

	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schedule"
)

// ScheduleOptions are "worker schedule demo"'s.
type ScheduleOptions struct {
	Config
	Workers int // at least 3
}

// Schedule is "worker schedule demo": it adds a 1-second catch-up job and
// a 1-second leader job, starts worker processes, SIGKILLs the leader's
// worker, SIGSTOPs the new leader for three times the lease, and checks
// the runs (CheckSlotRuns, CheckLeaderRuns), failing on a problem.
func Schedule(ctx context.Context, o ScheduleOptions) error {
	return interrupted(ctx, "schedule demo", runSchedule(ctx, o))
}

func runSchedule(ctx context.Context, o ScheduleOptions) error {
	if o.Workers < 3 {
		return usageError("--workers must be at least 3")
	}
	o.Config = o.withDefaults()
	out := o.Stdout
	env, err := start(ctx, o.Config, "baton_schedule_demo", "baton-schedule-demo-")
	if err != nil {
		return err
	}
	defer env.close()
	db, dir, schemaName := env.db, env.dir, o.Schema.Schema
	tickLog, leadLog := filepath.Join(dir, "tick.log"), filepath.Join(dir, "lead.log")
	jobs := []schedule.Definition{
		{Name: "tick", Every: time.Second, Missed: schedule.MissedCatchUp, LockAtMostFor: 5 * time.Second,
			Command: []string{"sh", "-c", `echo "$BATON_SLOT $BATON_WORKER" >> "$1"; sleep 0.3`, "tick", tickLog}},
		{Name: "lead", Every: time.Second, Mode: schedule.ModeLeader,
			Command: []string{"sh", "-c", `echo "$BATON_SLOT $BATON_WORKER" >> "$1"`, "lead", leadLog}},
	}
	for _, d := range jobs {
		if err := schedule.NewStore(db, schemaName).Add(ctx, d); err != nil {
			return err
		}
		fmt.Fprintf(out, "job %s: %s, mode %s, missed %s\n", d.Name, d.ScheduleString(), cmp.Or(string(d.Mode), "lock"), cmp.Or(string(d.Missed), "skip"))
	}

	timing := []string{"--heartbeat", "200ms", "--stale-after", "1s", "--confirm", "2"}
	fmt.Fprintf(out, "starting %d workers (%s)\n", o.Workers, strings.Join(timing, " "))
	procs := map[string]*exec.Cmd{}
	for i := 1; i <= o.Workers; i++ {
		id := fmt.Sprintf("sched-%d", i)
		c, err := env.startWorker(ctx, id, timing...)
		if err != nil {
			return err
		}
		procs[id] = c
	}
	defer func() {
		for _, c := range procs {
			_ = c.Process.Signal(syscall.SIGCONT)
			_ = c.Process.Kill()
		}
	}()
	began := time.Now()
	say := func(format string, a ...any) {
		fmt.Fprintf(out, "%6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, a...))
	}
	wait := func(what string, cond func(ticks int64, leader string) bool) error {
		deadline := time.Now().Add(60 * time.Second)
		for {
			ticks, leader, err := jobState(ctx, db, schemaName)
			if err == nil && cond(ticks, leader) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("schedule demo: no %s within a minute (logs in %s)", what, dir)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}

	var killed, stopped string
	var n int64
	if err := wait("leader and three tick runs", func(t int64, l string) bool { n, killed = t, l; return t >= 3 && l != "" }); err != nil {
		return err
	}
	_ = procs[killed].Process.Signal(syscall.SIGKILL)
	say("SIGKILL %s, which leads \"lead\" (tick has run %d times)", killed, n)
	if err := wait("new leader", func(t int64, l string) bool { stopped = l; return t >= n+3 && l != "" && l != killed }); err != nil {
		return err
	}
	say("%s leads \"lead\" now", stopped)
	_ = procs[stopped].Process.Signal(syscall.SIGSTOP)
	say("SIGSTOP %s for 3s (three times the lease)", stopped)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(3 * time.Second):
	}
	_ = procs[stopped].Process.Signal(syscall.SIGCONT)
	_, l, _ := jobState(ctx, db, schemaName)
	say("SIGCONT %s; \"lead\" is with %s", stopped, l)
	if err := wait("three more tick runs", func(t int64, _ string) bool { return t >= n+9 }); err != nil {
		return err
	}
	for id, c := range procs {
		if id != killed {
			_ = c.Process.Signal(syscall.SIGTERM)
		}
	}
	for id, c := range procs {
		if err := c.Wait(); err != nil && id != killed {
			return fmt.Errorf("worker %s: %v (log in %s)", id, err, env.logPath(id))
		}
	}
	say("workers stopped")
	fmt.Fprintln(out)
	if err := printJobs(ctx, out, db, schemaName); err != nil {
		return err
	}
	var lost Lost
	for id := range procs {
		if err := lost.readFile(id, env.logPath(id)); err != nil {
			return err
		}
	}
	return checkRuns(out, tickLog, leadLog, map[string]bool{killed: true, stopped: true}, lost)
}

// jobState is how often "tick" has run and which worker (by name) holds
// "lead" now ("" for none).
func jobState(ctx context.Context, db *dbconn.DB, schemaName string) (ticks int64, leader string, err error) {
	jobs, err := schedule.NewStore(db, schemaName).List(ctx)
	if err != nil {
		return 0, "", err
	}
	for _, j := range jobs {
		switch j.Name {
		case "tick":
			ticks = j.Runs
		case "lead":
			leader = partition.InstanceName(j.Owner)
		}
	}
	return ticks, leader, nil
}

// checkRuns checks and reports the runs the jobs logged.
func checkRuns(out io.Writer, tickLog, leadLog string, victims map[string]bool, lost Lost) error {
	ticks, err := ReadJobLog(tickLog)
	if err != nil {
		return err
	}
	leads, err := ReadJobLog(leadLog)
	if err != nil {
		return err
	}
	ts := CheckSlotRuns(ticks, victims, lost.Runs["tick"])
	lc := CheckLeaderRuns(leads, victims, lost.Workers["lead"])
	fmt.Fprintln(out)
	fmt.Fprintf(out, "tick  %d slots from %s to %s, %d runs; slots run twice: %d (first runner killed, stopped or reporting the run lost)\n",
		ts.Slots, ts.First.Format(time.TimeOnly), ts.Last.Format(time.TimeOnly), len(ticks), ts.Repeated)
	fmt.Fprintf(out, "lead  %d runs; the leader changed %d times: %s\n", len(leads), len(lc.Changes), strings.Join(lc.Changes, ", "))
	problems := append(ts.Problems, lc.Problems...)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(out, "  PROBLEM", p)
		}
		return fmt.Errorf("schedule demo: %d problem(s)", len(problems))
	}
	fmt.Fprintln(out, "OK: every slot ran, none twice but after a killed or stopped runner (or one that reported the run lost); the leader moved only when its worker died or lost it")
	return nil
}

// printJobs lists the demo's jobs and their last runs.
func printJobs(ctx context.Context, w io.Writer, db *dbconn.DB, schemaName string) error {
	jobs, err := schedule.NewStore(db, schemaName).List(ctx)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		fmt.Fprintf(w, "%-6s %-7s %-6s %-14s runs %-4d last %s %s\n", j.Name, j.State, j.Mode, j.Schedule, j.Runs,
			j.LastResult, strings.Join(strings.Fields(j.LastError), " "))
	}
	return nil
}
