package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/jobs"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/schedule"
)

// The built-in verify job passes on correctly priced data and, once a
// priced row and a checkpoint are corrupted, fails its run, logs the
// mismatches and shows them in "schedule list".
func TestVerifyJobReportsMismatches(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	c.mustRun("run", "--until-done", "--jobs=false", "--heartbeat", "100ms", "--stale-after", "1s")
	db := pgtest.OpenDB(t, c.dsn, dbconn.Options{})
	ctx := context.Background()
	var logs bytes.Buffer
	logger := newTestLogger(&logs)
	var found []int
	job := jobs.Verify(db, "", logger, func(n int) { found = append(found, n) })
	run := &schedule.Run{Job: "verify", Slot: time.Now().UTC()}
	if err := job(ctx, run); err != nil {
		t.Fatalf("verify of correct output: %v", err)
	}
	// Records not priced yet (pricing under way) are no mismatch.
	if _, err := db.Exec(`
		WITH c AS (SELECT partition_key FROM baton.tasks ORDER BY partition_key LIMIT 1),
		r AS (
			INSERT INTO baton.record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
			SELECT contract_id, max(seq) + 1, max(seq) + 1, max(load_id), '{pending-1}', '{100}' FROM baton.records
			WHERE contract_id = (SELECT partition_key FROM c) GROUP BY contract_id
		)
		UPDATE baton.tasks SET available = available + 1 WHERE partition_key = (SELECT partition_key FROM c)`); err != nil {
		t.Fatal(err)
	}
	if err := job(ctx, run); err != nil {
		t.Fatalf("verify with pricing under way: %v", err)
	}
	if _, err := db.Exec(`UPDATE baton.priced SET net_minor = net_minor + 1
		WHERE (contract_id, seq) = (SELECT contract_id, seq FROM baton.priced ORDER BY contract_id, seq LIMIT 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE baton.tasks SET position = position - 1, available = available
		WHERE partition_key = (SELECT max(partition_key) FROM baton.tasks WHERE position > 0)`); err != nil {
		t.Fatal(err)
	}
	err := job(ctx, run)
	if err == nil || !strings.Contains(err.Error(), "2 mismatch") || !strings.Contains(err.Error(), "checkpoint ") {
		t.Fatalf("verify of corrupted output: %v, want 2 mismatches, one a checkpoint", err)
	}
	if len(found) != 3 || found[0] != 0 || found[1] != 0 || found[2] != 2 {
		t.Fatalf("mismatch counts reported %v, want [0 0 2]", found)
	}
	if strings.Count(logs.String(), "verify_mismatch") != 2 {
		t.Fatalf("want two verify_mismatch log events:\n%s", logs.String())
	}

	// Through a worker: the run fails and schedule list shows why.
	c.mustRun("schedule", "add", "verify", "--every", "1h", "--builtin", "verify")
	c.mustRun("schedule", "trigger", "verify")
	w := c.command("run", "--heartbeat", "100ms", "--stale-after", "1s", "--log-format", "json")
	var wlog bytes.Buffer
	w.Stdout, w.Stderr = &wlog, &wlog
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Process.Kill() })
	waitFor(t, "the verify run", func() bool { n, _ := jobRuns(t, db.DB, "verify"); return n >= 1 })
	_ = w.Process.Signal(syscall.SIGTERM)
	if err := w.Wait(); err != nil {
		t.Fatalf("worker: %v\n%s", err, wlog.String())
	}
	v := listJobs(t, c)["verify"]
	if v["last_result"] != "failed" || !strings.Contains(v["last_error"].(string), "mismatch") {
		t.Fatalf("schedule list: %v", v)
	}
	if !strings.Contains(wlog.String(), `"event":"verify_mismatch"`) {
		t.Fatalf("worker log lacks verify_mismatch:\n%s", wlog.String())
	}
}

func newTestLogger(w *bytes.Buffer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }
