package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/report"
)

// status lists the contracts in the states asked for, at most --limit of
// them, and says how many it left out; its totals stay the cluster's.
func TestStatusFiltersByStateAndLimits(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	if _, err := db.Exec(`UPDATE baton.tasks SET failed_at = now(), lease_expires_at = 'infinity', attempts = 5, last_error = 'test'
		WHERE partition_key IN (SELECT partition_key FROM baton.tasks ORDER BY partition_key LIMIT 2)`); err != nil {
		t.Fatal(err)
	}
	var s report.Status
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json", "--state", "quarantined")), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Partitions) != 2 || s.Partitions[0].State != "quarantined" || s.Totals.Partitions != 12 {
		t.Fatalf("--state quarantined: %d contracts (%v), totals %d; want 2 quarantined of 12", len(s.Partitions), s.Partitions, s.Totals.Partitions)
	}
	out := c.mustRun("status", "--state", "pending", "--limit", "3")
	if rows := strings.Count(out, "  pending  "); rows != 3 || !strings.Contains(out, "… 7 more not listed") {
		t.Errorf("--state pending --limit 3: %d pending rows, want 3 and 7 more not listed:\n%s", rows, out)
	}
	if _, errs, code := c.run("status", "--state", "sleeping"); code != clienv.ExitUsage || !strings.Contains(errs, `--state "sleeping"`) {
		t.Errorf("--state sleeping: exit %d, want %d naming the state:\n%s", code, clienv.ExitUsage, errs)
	}
}
