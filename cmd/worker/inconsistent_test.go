package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"

	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/report"
)

// A contract whose checkpoint lies beyond its stored records is an error,
// not done: status reports it inconsistent with the reason, export
// --complete fails (exit 4) without writing anything, and a plain export
// warns about it. That is what a second processor sharing the schema did
// to the pricing partitions before they had a kind: it added three items
// of its own to a contract and moved the checkpoint past them, and status
// said done while export --complete silently left records out.
func TestCheckpointBeyondTheRecordsIsAnError(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	dir := t.TempDir()
	c.mustRun("export", "--complete", "--out", filepath.Join(dir, "before.csv"))

	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	var key string
	if err := db.QueryRow(`UPDATE baton.tasks SET available = available + 3, position = position + 3
		WHERE partition_key = (SELECT min(partition_key) FROM baton.tasks) RETURNING partition_key`).Scan(&key); err != nil {
		t.Fatal(err)
	}

	var s report.Status
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range s.Partitions {
		if p.ContractID != key {
			if p.State != "done" {
				t.Errorf("%s: state %s, want done", p.ContractID, p.State)
			}
			continue
		}
		found = true
		if p.State != report.StateInconsistent || p.Error == nil || !strings.Contains(*p.Error, "beyond the contract's") {
			t.Errorf("%s, checkpoint beyond its records: state %s, error %v; want inconsistent, saying why", key, p.State, p.Error)
		}
	}
	if !found || s.Totals.ByState[report.StateInconsistent] != 1 {
		t.Errorf("status --json: contract %s found %v, by state %v; want one inconsistent", key, found, s.Totals.ByState)
	}
	if out := c.mustRun("status"); !strings.Contains(out, "inconsistent") {
		t.Errorf("status does not say inconsistent:\n%s", out)
	}

	out := filepath.Join(dir, "after.csv")
	stdout, stderr, code := c.run("export", "--complete", "--out", out)
	if code != clienv.ExitIncomplete || !strings.Contains(stderr, key) || !strings.Contains(stderr, "beyond") {
		t.Errorf("export --complete with %s inconsistent: exit %d\n%s%s; want exit %d naming it", key, code, stdout, stderr, clienv.ExitIncomplete)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("export --complete that failed left %s: %v", out, err)
	}
	if _, stderr, code := c.run("export", "--complete", "--out", "-"); code != clienv.ExitIncomplete {
		t.Errorf("export --complete --out - with %s inconsistent: exit %d\n%s", key, code, stderr)
	}
	if _, stderr, code := c.run("export", "--out", out); code != 0 || !strings.Contains(stderr, "warning: contract "+key) {
		t.Errorf("export without --complete: exit %d\n%s; want it written, with a warning naming %s", code, stderr, key)
	}
}
