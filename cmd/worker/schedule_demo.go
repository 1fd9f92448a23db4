package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/schedule"
)

type scheduleDemoOptions struct {
	workers int
	pgDir   string
	fresh   bool
}

func newScheduleDemoCmd(g *globals) *cobra.Command {
	var o scheduleDemoOptions
	cmd := &cobra.Command{
		Use:     "demo",
		Short:   "Show scheduled jobs: workers run a 1-second catch-up job and a leader job through a SIGKILL and a SIGSTOP",
		Example: `  worker schedule demo`,
		Long: `demo adds two jobs, "tick" (every second, catch-up, lock mode) and "lead"
(every second, leader mode), starts worker processes, SIGKILLs the leader's
worker, then SIGSTOPs the new leader for three times the lease, and checks
the runs: every slot ran, a slot ran twice only when its first runner was
killed or stopped, and the leader job moved only when its worker died.

Never touches the database named by DATABASE_URL (or --database-url):
with it set, the demo creates a database of its own on the same server
(the role needs CREATEDB), adds its jobs and runs its workers there, and
drops it at the end, also when interrupted (SIGINT, SIGTERM). The jobs
(even ones named "tick" or "lead"), records and workers of the named
database are left alone. With DATABASE_URL unset it runs a private
PostgreSQL (see "worker demo").

Writes files: the jobs' output and the workers' logs, in a temporary
directory removed at the end; without DATABASE_URL, the private server's
data in --pg-dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return interrupted(cmd.Context(), "schedule demo", runScheduleDemo(cmd.Context(), g, o))
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.workers, "workers", 3, "worker processes (at least 3)")
	atLeast(f, "workers", "3")
	f.StringVar(&o.pgDir, "pg-dir", defaultPGDir(), "data directory of the private PostgreSQL (without DATABASE_URL)")
	f.BoolVar(&o.fresh, "fresh", false, "delete --pg-dir first")
	return cmd
}

func runScheduleDemo(ctx context.Context, g *globals, o scheduleDemoOptions) error {
	if o.workers < 3 {
		return usageError("--workers must be at least 3")
	}
	out := g.stdout
	env, err := startDemo(ctx, g, demoPlace{name: "baton_schedule_demo", pgDir: o.pgDir, fresh: o.fresh}, "baton-schedule-demo-")
	if err != nil {
		return err
	}
	defer env.close()
	db, dir := env.db, env.dir
	tickLog, leadLog := filepath.Join(dir, "tick.log"), filepath.Join(dir, "lead.log")
	jobs := []schedule.Definition{
		{Name: "tick", Every: time.Second, Missed: schedule.MissedCatchUp, LockAtMostFor: 5 * time.Second,
			Command: []string{"sh", "-c", `echo "$BATON_SLOT $BATON_WORKER" >> "$1"; sleep 0.3`, "tick", tickLog}},
		{Name: "lead", Every: time.Second, Mode: schedule.ModeLeader,
			Command: []string{"sh", "-c", `echo "$BATON_SLOT $BATON_WORKER" >> "$1"`, "lead", leadLog}},
	}
	for _, d := range jobs {
		if err := schedule.NewStore(db, g.schema).Add(ctx, d); err != nil {
			return err
		}
		fmt.Fprintf(out, "job %s: %s, mode %s, missed %s\n", d.Name, d.ScheduleString(), cmpStr(string(d.Mode), "lock"), cmpStr(string(d.Missed), "skip"))
	}

	timing := []string{"--heartbeat", "200ms", "--stale-after", "1s", "--confirm", "2"}
	fmt.Fprintf(out, "starting %d workers (%s)\n", o.workers, strings.Join(timing, " "))
	procs := map[string]*exec.Cmd{}
	for i := 1; i <= o.workers; i++ {
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
	state := func() (ticks int64, leader string, err error) {
		err = db.QueryRowContext(ctx, g.sql(`
			SELECT (SELECT runs FROM {{.Schema}}.jobs WHERE name = 'tick'),
			       (SELECT CASE WHEN lease_expires_at > now() THEN split_part(coalesce(owner, ''), '#', 1) ELSE '' END
			        FROM {{.Schema}}.jobs WHERE name = 'lead')`)).Scan(&ticks, &leader)
		return ticks, leader, err
	}
	wait := func(what string, cond func(ticks int64, leader string) bool) error {
		deadline := time.Now().Add(60 * time.Second)
		for {
			ticks, leader, err := state()
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
	_, l, _ := state()
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
	if err := printJobs(ctx, out, db, g.schema); err != nil {
		return err
	}

	victims := map[string]bool{killed: true, stopped: true}
	ticks, err := readJobLog(tickLog)
	if err != nil {
		return err
	}
	leads, err := readJobLog(leadLog)
	if err != nil {
		return err
	}
	ts := checkSlotRuns(ticks, victims)
	lc := checkLeaderRuns(leads, victims)
	fmt.Fprintln(out)
	fmt.Fprintf(out, "tick  %d slots from %s to %s, %d runs; slots run twice: %d (first runner killed or stopped)\n",
		ts.slots, ts.first.Format(time.TimeOnly), ts.last.Format(time.TimeOnly), len(ticks), ts.repeated)
	fmt.Fprintf(out, "lead  %d runs; the leader changed %d times: %s\n", len(leads), len(lc.changes), strings.Join(lc.changes, ", "))
	problems := append(ts.problems, lc.problems...)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(out, "  PROBLEM", p)
		}
		return fmt.Errorf("schedule demo: %d problem(s)", len(problems))
	}
	fmt.Fprintln(out, "OK: every slot ran, none twice but after a killed or stopped runner; the leader moved only when its worker died")
	return nil
}

func cmpStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func printJobs(ctx context.Context, w io.Writer, db *dbconn.DB, schemaName string) error {
	jobs, err := schedule.NewStore(db, schemaName).List(ctx)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		fmt.Fprintf(w, "%-6s %-7s %-6s %-14s runs %-4d last %s %s\n", j.Name, j.State, j.Mode, j.Schedule, j.Runs,
			j.LastResult, oneLine(j.LastError))
	}
	return nil
}

// jobRun is one line a demo or test job appends: its slot and worker.
type jobRun struct {
	slot   time.Time
	worker string // worker name, without the instance suffix
}

func readJobLog(path string) ([]jobRun, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []jobRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 2 {
			return nil, fmt.Errorf("%s: bad line %q", path, sc.Text())
		}
		slot, err := time.Parse(time.RFC3339Nano, fs[0])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, jobRun{slot, strings.SplitN(fs[1], "#", 2)[0]})
	}
	return out, sc.Err()
}

type slotCheck struct {
	slots, repeated int
	first, last     time.Time
	problems        []string
}

// checkSlotRuns checks a 1-second job's runs: every slot from the first to
// the last ran, and a slot ran again only after a run by a victim.
func checkSlotRuns(runs []jobRun, victims map[string]bool) slotCheck {
	var c slotCheck
	seen := map[time.Time]string{}
	for _, r := range runs {
		if prev, ok := seen[r.slot]; ok {
			c.repeated++
			if !victims[prev] {
				c.problems = append(c.problems, fmt.Sprintf("slot %s ran twice: by %s (neither killed nor stopped), then %s",
					r.slot.Format(time.RFC3339), prev, r.worker))
			}
		}
		seen[r.slot] = r.worker
		if c.first.IsZero() || r.slot.Before(c.first) {
			c.first = r.slot
		}
		if r.slot.After(c.last) {
			c.last = r.slot
		}
	}
	c.slots = len(seen)
	if len(seen) == 0 {
		c.problems = append(c.problems, "no slot ran")
		return c
	}
	var missing []string
	for s := c.first; !s.After(c.last); s = s.Add(time.Second) {
		if _, ok := seen[s]; !ok {
			missing = append(missing, s.Format(time.TimeOnly))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		c.problems = append(c.problems, "slots never ran: "+strings.Join(missing, ", "))
	}
	return c
}

type leaderCheck struct {
	changes  []string
	problems []string
}

// checkLeaderRuns checks a leader-mode job's runs: the worker changes only
// after a victim's run.
func checkLeaderRuns(runs []jobRun, victims map[string]bool) leaderCheck {
	var c leaderCheck
	for i := 1; i < len(runs); i++ {
		prev, cur := runs[i-1].worker, runs[i].worker
		if prev == cur {
			continue
		}
		c.changes = append(c.changes, prev+" → "+cur)
		if !victims[prev] {
			c.problems = append(c.problems, fmt.Sprintf("leader job moved from %s to %s at %s although %s was alive",
				prev, cur, runs[i].slot.Format(time.RFC3339), prev))
		}
	}
	return c
}
