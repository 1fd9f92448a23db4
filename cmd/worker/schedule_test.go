package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/demo"
	"github.com/batonhq/baton/internal/pgtest"
)

func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"schedule", "add", "x", "--", "true"}, clienv.ExitUsage},                                         // no schedule
		{[]string{"schedule", "add", "x", "--every", "1s", "--cron", "* * * * *", "--", "true"}, clienv.ExitUsage}, // both
		{[]string{"schedule", "add", "x", "--every", "1s"}, clienv.ExitUsage},                                      // nothing to run
		{[]string{"schedule", "add", "x", "--cron", "61 * * * *", "--", "true"}, clienv.ExitUsage},                 // bad cron
		{[]string{"schedule", "add", "x", "--every", "1s", "--mode", "auto", "--", "true"}, clienv.ExitUsage},
		{[]string{"schedule", "add", "x", "--every", "1s", "--builtin", "nope"}, clienv.ExitUsage},
		{[]string{"schedule", "remove", "nope"}, clienv.ExitNotFound},
		{[]string{"schedule", "trigger", "nope"}, clienv.ExitNotFound},
	} {
		if _, errs, code := c.run(tc.args...); code != tc.code {
			t.Errorf("worker %s: exit %d, want %d\n%s", strings.Join(tc.args, " "), code, tc.code, errs)
		}
	}
	c.mustRun("schedule", "add", "report", "--cron", "0 3 * * *", "--mode", "leader", "--missed", "catch-up",
		"--lock-at-most-for", "10m", "--lock-at-least-for", "1m", "--", "sh", "-c", "echo hi")
	c.mustRun("schedule", "add", "verify", "--every", "1h", "--builtin", "verify")
	// Adding an existing name updates it.
	c.mustRun("schedule", "add", "report", "--every", "30m", "--", "sh", "-c", "echo updated")
	c.mustRun("schedule", "trigger", "verify")
	jobs := listJobs(t, c)
	if len(jobs) != 2 {
		t.Fatalf("list: %+v", jobs)
	}
	r := jobs["report"]
	if r["schedule"] != "every 30m0s" || r["mode"] != "lock" || r["state"] != "idle" || r["runs"] != 0.0 {
		t.Errorf("report after update: %v", r)
	}
	for _, k := range []string{"name", "state", "owner", "mode", "schedule", "next_run", "last_run_started",
		"last_run_finished", "last_result", "last_error", "runs"} {
		if _, ok := r[k]; !ok {
			t.Errorf("schedule list --json lacks %q", k)
		}
	}
	if out := c.mustRun("schedule", "list"); !strings.Contains(out, "report") || !strings.Contains(out, "NEXT RUN") {
		t.Errorf("schedule list:\n%s", out)
	}
	c.mustRun("schedule", "remove", "report")
	if jobs := listJobs(t, c); len(jobs) != 1 {
		t.Fatalf("after remove: %+v", jobs)
	}
}

func listJobs(t *testing.T, c cli) map[string]map[string]any {
	t.Helper()
	var jobs []map[string]any
	if err := json.Unmarshal([]byte(c.mustRun("schedule", "list", "--json")), &jobs); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, j := range jobs {
		out[j["name"].(string)] = j
	}
	return out
}

func jobRuns(t *testing.T, db *bun.DB, name string) (runs int64, owner string) {
	t.Helper()
	if err := db.QueryRow(`SELECT runs, CASE WHEN lease_expires_at > now() THEN coalesce(owner, '') ELSE '' END
		FROM baton.jobs WHERE name = ?`, name).Scan(&runs, &owner); err != nil {
		t.Fatal(err)
	}
	return runs, owner
}

// waitFor polls the database until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling the database for progress
	}
}

// Three real workers run a 1-second catch-up job and a leader-mode job
// through a SIGKILL and a SIGSTOP longer than the lease: every slot runs,
// a slot runs twice only if its first runner was killed or stopped (or
// reported the run lost), and the leader job changes worker only when its
// worker dies (or reported losing it).
func TestScheduledJobsThroughKillAndStop(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	dir := t.TempDir()
	tickLog, leadLog := filepath.Join(dir, "tick"), filepath.Join(dir, "lead")
	for _, f := range []string{tickLog, leadLog} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// tick takes a while, so a kill can land mid-run.
	c.mustRun("schedule", "add", "tick", "--every", "1s", "--missed", "catch-up", "--lock-at-most-for", "5s",
		"--", "sh", "-c", `echo "$BATON_SLOT $BATON_WORKER" >> `+tickLog+`; sleep 0.3`)
	c.mustRun("schedule", "add", "lead", "--every", "1s", "--mode", "leader",
		"--", "sh", "-c", `echo "$BATON_SLOT $BATON_WORKER" >> `+leadLog)

	args := []string{"run", "--heartbeat", "100ms", "--stale-after", "1s", "--confirm", "2", "--log-format", "json"}
	procs := map[string]*exec.Cmd{}
	logs := map[string]*bytes.Buffer{}
	for _, id := range []string{"w1", "w2", "w3"} {
		cmd := c.command(append(args, "--id", id)...)
		logs[id] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = logs[id], logs[id]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[id] = cmd
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGCONT)
			_ = p.Process.Kill()
		}
	})
	workerOf := func(instance string) string { return strings.SplitN(instance, "#", 2)[0] }

	var leader string
	waitFor(t, "three tick runs and a leader", func() bool {
		n, _ := jobRuns(t, db, "tick")
		_, o := jobRuns(t, db, "lead")
		leader = workerOf(o)
		return n >= 3 && leader != ""
	})
	// SIGKILL the leader job's worker.
	killed := leader
	if err := procs[killed].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = procs[killed].Wait()
	n0, _ := jobRuns(t, db, "tick")
	waitFor(t, "a new leader and three more tick runs", func() bool {
		n, _ := jobRuns(t, db, "tick")
		_, o := jobRuns(t, db, "lead")
		leader = workerOf(o)
		return n >= n0+3 && leader != "" && leader != killed
	})
	// SIGSTOP the new leader for three times the lease.
	stopped := leader
	if err := procs[stopped].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	n1, _ := jobRuns(t, db, "tick")
	waitFor(t, "three tick runs while one worker is stopped", func() bool {
		n, _ := jobRuns(t, db, "tick")
		return n >= n1+3
	})
	if rest := 3*time.Second - time.Since(stoppedAt); rest > 0 {
		time.Sleep(rest) // the fault's duration: a pause longer than the lease
	}
	if err := procs[stopped].Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	n2, _ := jobRuns(t, db, "tick")
	waitFor(t, "three tick runs after the stopped worker resumed", func() bool {
		n, _ := jobRuns(t, db, "tick")
		return n >= n2+3
	})

	jobs := listJobs(t, c)
	if len(jobs) != 2 || jobs["tick"]["mode"] != "lock" || jobs["lead"]["mode"] != "leader" ||
		jobs["lead"]["owner"] == "" || jobs["tick"]["runs"].(float64) < float64(n2+3) {
		t.Fatalf("schedule list --json: %v", jobs)
	}

	for id, p := range procs {
		if id == killed {
			continue
		}
		if err := p.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for id, p := range procs {
		if id == killed {
			continue
		}
		if err := p.Wait(); err != nil {
			t.Errorf("worker %s: %v\n%s", id, err, logs[id])
		}
	}

	victims := map[string]bool{killed: true, stopped: true}
	ticks, err := demo.ReadJobLog(tickLog)
	if err != nil {
		t.Fatal(err)
	}
	leads, err := demo.ReadJobLog(leadLog)
	if err != nil {
		t.Fatal(err)
	}
	// A worker starved of CPU for longer than the lease (this machine may
	// be busy) loses its job as a stopped one does, and says so.
	var lost demo.Lost
	for id, l := range logs {
		if err := lost.ReadLog(id, bytes.NewReader(l.Bytes())); err != nil {
			t.Fatal(err)
		}
	}
	ts := demo.CheckSlotRuns(ticks, victims, lost.Runs["tick"])
	lc := demo.CheckLeaderRuns(leads, victims, lost.Workers["lead"])
	t.Logf("tick: %d runs of %d slots (%s – %s), %d repeated; lead: %d runs, changes %v; killed %s, stopped %s",
		len(ticks), ts.Slots, ts.First.Format(time.RFC3339), ts.Last.Format(time.RFC3339), ts.Repeated,
		len(leads), lc.Changes, killed, stopped)
	for _, p := range append(ts.Problems, lc.Problems...) {
		t.Error(p)
	}
	if ts.Slots < 12 {
		t.Errorf("only %d tick slots ran", ts.Slots)
	}
	if len(lc.Changes) == 0 {
		t.Errorf("the leader job never changed worker although its worker was killed")
	}
	for id, l := range logs {
		if id != killed && !strings.Contains(l.String(), `"event":"job_output"`) && !strings.Contains(l.String(), `"job":"tick"`) {
			t.Errorf("worker %s logged nothing about its jobs:\n%s", id, l)
		}
	}
}

// The schedule demo runs end to end against a given database and reports
// success.
func TestScheduleDemo(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	out := c.mustRun("schedule", "demo")
	for _, want := range []string{"SIGKILL sched-", "SIGSTOP sched-", "OK: every slot ran"} {
		if !strings.Contains(out, want) {
			t.Errorf("schedule demo output lacks %q:\n%s", want, out)
		}
	}
}
