package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/report"
)

// status reports the backlog exactly as the task rows have it, with the
// rate from the samples the workers stored and each contract's ETA.
func TestStatusReportsTheBacklog(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	var pending, contracts int64
	if err := db.QueryRow(`SELECT sum(available - position), count(*) FROM baton.tasks WHERE kind = 'pricing'`).Scan(&pending, &contracts); err != nil {
		t.Fatal(err)
	}
	// A sample a minute ago with 120 more pending: 120 priced in a
	// minute by one worker, registered now.
	if _, err := db.Exec(`
		INSERT INTO baton.backlog_samples (kind, at, pending_items, pending_partitions, quarantined_items,
		       quarantined_partitions, added_items, rewound_items, workers)
		SELECT 'pricing', now() - interval '60 seconds', sum(available - position) + 120, count(*), 0, 0, sum(available), 0, 1
		  FROM baton.tasks WHERE kind = 'pricing';
		INSERT INTO baton.workers (instance_id, name, kind, expires_at) VALUES ('w#1', 'w', 'pricing', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	var s report.Status
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json", "--drain-target", "1h")), &s); err != nil {
		t.Fatal(err)
	}
	b := s.Backlog
	if b == nil || b.PendingItems != pending || b.PendingContracts != contracts || b.LiveWorkers != 1 || b.RatePerSecond == nil ||
		*b.RatePerSecond < 1.9 || *b.RatePerSecond > 2 || b.DrainMS == nil || b.WorkersNeeded != 1 {
		t.Fatalf("backlog %+v; want %d pending in %d contracts, 1 worker, about 2 records/s, 1 worker needed", b, pending, contracts)
	}
	for _, p := range s.Partitions {
		if p.ETAMS == nil || *p.ETAMS > *b.DrainMS {
			t.Errorf("%s: ETA %v, want one within the drain time %d ms", p.ContractID, p.ETAMS, *b.DrainMS)
		}
	}
	out := c.mustRun("status", "--drain-target", "1h")
	for _, want := range []string{"backlog: ", "records pending in 12 contracts", "records/s over the last", "1 workers would drain it within 1h0m0s (1 live)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
