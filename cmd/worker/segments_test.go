package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/report"
)

// A contract split into segments is one contract to the operator: status
// lists it (never its segments) with their records pending and their
// state, run --until-done counts it once among the quarantined, retry
// CONTRACT re-enables its segments, and export --complete waits for them.
func TestSplitContractIsOneContract(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	const big = "random-mix"
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	// Two more loads of the contract: its records lie in several chunks,
	// so it splits into several segments.
	dir := t.TempDir()
	for l := range 2 {
		var b strings.Builder
		b.WriteString("contract_id,record_id,amount_minor\n")
		for i := range 700 {
			fmt.Fprintf(&b, "%s,extra-%d-%d,%d\n", big, l, i, 1+(i*7919)%1333)
		}
		path := filepath.Join(dir, fmt.Sprintf("extra%d.csv", l))
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		c.mustRun("load", "--records", path)
	}
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s", "--segment-records", "1", "--batch-size", "100")
	before := filepath.Join(dir, "before.csv")
	c.mustRun("export", "--complete", "--out", before)

	// The contract's last two segments, caught up, are moved back to
	// their starts (with the state the segment before each ended with),
	// their output deleted, and quarantined.
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	var n int
	var records int64
	if err := db.QueryRow(`SELECT count(*), max(available) FROM baton.tasks WHERE kind = 'pricing' AND segment_of = ? AND position = available`, big).Scan(&n, &records); err != nil || n < 3 {
		t.Fatalf("%s has %d caught-up segments (%v); want at least 3", big, n, err)
	}
	res, err := db.Exec(`
		WITH s AS (
			SELECT partition_key, available,
			       lag(position) OVER w AS start, lag(checkpoint) OVER w AS state,
			       row_number() OVER (ORDER BY partition_key DESC) AS back
			  FROM baton.tasks WHERE kind = 'pricing' AND segment_of = ? WINDOW w AS (ORDER BY partition_key)
		), d AS (
			DELETE FROM baton.priced p USING s
			 WHERE s.back <= 2 AND p.contract_id = ? AND p.seq > s.start AND p.seq <= s.available
		)
		UPDATE baton.tasks t SET position = s.start, checkpoint = s.state, failed_at = now(), attempts = 5,
		       last_error = 'boom', lease_expires_at = 'infinity'
		  FROM s WHERE s.back <= 2 AND t.kind = 'pricing' AND t.partition_key = s.partition_key`, big, big)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 2 {
		t.Fatalf("%d segments moved back; want 2", n)
	}
	var unpriced int64
	if err := db.QueryRow(`SELECT sum(available - position) FROM baton.tasks WHERE kind = 'pricing' AND segment_of = ?`, big).Scan(&unpriced); err != nil || unpriced == 0 {
		t.Fatalf("unpriced records in the segments: %d, %v", unpriced, err)
	}
	var contracts int
	if err := db.QueryRow(`SELECT count(*) FROM baton.contracts`).Scan(&contracts); err != nil {
		t.Fatal(err)
	}

	var s report.Status
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Partitions) != contracts || s.Totals.Partitions != contracts {
		t.Errorf("status lists %d contracts (totals %d); want %d", len(s.Partitions), s.Totals.Partitions, contracts)
	}
	for _, p := range s.Partitions {
		if strings.Contains(p.ContractID, "#") {
			t.Errorf("status lists segment %s as a contract", p.ContractID)
		}
		if p.ContractID != big {
			continue
		}
		if p.State != "quarantined" || p.Pending != unpriced || p.Processed != records-unpriced || p.PricedThrough != records-unpriced ||
			p.Segments != 2 || p.SegmentsHeld != 0 || p.Error == nil || !strings.Contains(*p.Error, "boom") {
			t.Errorf("%s: %+v; want quarantined, %d pending, 2 segments", big, p, unpriced)
		}
	}
	if s.Totals.Pending != unpriced || s.Totals.ByState["quarantined"] != 1 {
		t.Errorf("totals %+v; want %d pending, one contract quarantined", s.Totals, unpriced)
	}
	if out := c.mustRun("status"); !strings.Contains(out, "SEGMENTS") || !strings.Contains(out, "2 (0 held)") || strings.Contains(out, big+"#") {
		t.Errorf("status:\n%s", out)
	}

	if _, stderr, code := c.run("export", "--complete", "--out", filepath.Join(dir, "early.csv")); code != clienv.ExitIncomplete {
		t.Errorf("export --complete with a segment unpriced: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := c.run("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s"); code != clienv.ExitIncomplete ||
		!strings.Contains(stderr, "1 contract is quarantined") {
		t.Errorf("run --until-done with two segments of one contract quarantined: exit %d\n%s; want 1 contract", code, stderr)
	}
	c.mustRun("retry", big)
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	after := filepath.Join(dir, "after.csv")
	c.mustRun("export", "--complete", "--out", after)
	b1, err1 := os.ReadFile(before)
	b2, err2 := os.ReadFile(after)
	if err1 != nil || err2 != nil || string(b1) != string(b2) {
		t.Errorf("the export after re-pricing the segments differs from the first (%v, %v)", err1, err2)
	}
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Totals.Pending != 0 || s.Totals.ByState["done"] != contracts {
		t.Errorf("after retry and pricing: totals %+v", s.Totals)
	}
}
