package rerate_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"strconv"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/rerate"
)

// totals is a contract's priced records and net total.
type totals struct{ n, net int64 }

// readTotals reads every contract's totals from priced in one statement.
func readTotals(ctx context.Context, db *dbconn.DB) (map[string]totals, error) {
	rows, err := db.QueryContext(ctx, `SELECT contract_id, count(*), sum(net_minor) FROM baton.priced GROUP BY contract_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]totals{}
	for rows.Next() {
		var c string
		var x totals
		if err := rows.Scan(&c, &x.n, &x.net); err != nil {
			return nil, err
		}
		out[c] = x
	}
	return out, rows.Err()
}

// goldenTotals are the contracts' totals in the golden output.
func goldenTotals(t *testing.T) map[string]totals {
	t.Helper()
	rows, err := csv.NewReader(bytes.NewReader(golden(t))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]totals{}
	for _, r := range rows[1:] {
		net, err := strconv.ParseInt(r[4], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		x := out[r[0]]
		x.n++
		x.net += net
		out[r[0]] = x
	}
	return out
}

// A reader running in a loop while every contract is re-priced, through
// each contract's switch, reads each contract's totals as one whole
// generation's, the old or the new, never a mix of the two: rows of the
// generation being priced are invisible until the commit that makes it
// current, and the rows it replaces stay visible until then.
func TestReadersSeeOneGenerationThroughTheSwitch(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	loadUndiscounted(t, db)
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	old, err := readTotals(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	want := goldenTotals(t)
	var reqs []rerate.Request
	for c, tiers := range vectorTiers(t) {
		reqs = append(reqs, rerate.Request{Contract: c, NewTiers: tiers, Reason: "tiers corrected", StartedBy: "test"})
	}
	if _, err := start(t, db, reqs); err != nil {
		t.Fatal(err)
	}

	stop := watchTotals(t, db, old, want)
	runUntilDone(t, db, distributor.Config{BatchSize: 7})
	reads := stop()
	got, err := readTotals(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for c, w := range want {
		if got[c] != w {
			t.Errorf("contract %s after the re-pricing: %+v, want %+v", c, got[c], w)
		}
	}
	t.Logf("%d reads through the re-pricing, none mixed", reads)
}

// watchTotals reads every contract's totals in a loop, failing t for each
// read in which a contract's are neither old's nor want's (a mix of two
// generations), until stop is called; stop reads once more and returns
// how many reads there were, and fails t if there were fewer than two
// (none during the work it watched) or a read failed.
func watchTotals(t *testing.T, db *dbconn.DB, old, want map[string]totals) (stop func() int) {
	t.Helper()
	ctx := context.Background()
	type report struct {
		reads int
		err   error
	}
	quit, done := make(chan struct{}), make(chan report)
	go func() {
		var r report
		check := func() bool {
			got, err := readTotals(ctx, db)
			if err != nil {
				r.err = err
				return false
			}
			r.reads++
			for c, w := range want {
				if g := got[c]; g != old[c] && g != w {
					t.Errorf("read %d: contract %s totals %+v, neither the old generation's %+v nor the new one's %+v", r.reads, c, g, old[c], w)
				}
			}
			return true
		}
		for {
			select {
			case <-quit:
				check() // after the last switch
				done <- r
				return
			default:
				if !check() {
					done <- r
					return
				}
			}
		}
	}()
	return func() int {
		t.Helper()
		close(quit)
		r := <-done
		if r.err != nil {
			t.Fatalf("reading the totals: %v", r.err)
		}
		if r.reads < 2 {
			t.Fatalf("%d reads, want reads during the re-pricing and after it", r.reads)
		}
		return r.reads
	}
}

// An amendment file that also adds a record: the diff lists the amended
// record's suffix and the added record (no old row), and each contract's
// changes, a missing row counting 0, sum exactly to the change of its net
// total.
func TestDiffWithAnAddedRecordSumsToItsTotals(t *testing.T) {
	t.Parallel()
	const key, seq = "random-mix", 1500
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	truth := loadWithAWrongAmount(t, db, key, seq)
	runUntilDone(t, db, distributor.Config{BatchSize: 64})
	amend := writeFile(t, "amend.csv", []string{"contract_id,record_id,amount_minor", truth, key + ",late-record,500"})
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{RecordsPath: amend, Amend: true, Reason: "meter corrected", StartedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 64})
	sums := map[string]int64{}
	var added []rerate.Change
	diffs, err := rerate.NewStore(db, "").Diff(ctx, nil, func(c rerate.Change) error {
		sums[c.Contract] += c.NewNet - c.OldNet
		if c.Added {
			added = append(added, c)
		}
		if c.Removed {
			t.Errorf("record %s removed: %+v", c.RecordID, c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || diffs[0].Contract != key {
		t.Fatalf("diffs %+v, want one of %s", diffs, key)
	}
	d := diffs[0]
	if sums[key] != d.NewNetTotal-d.OldNetTotal {
		t.Errorf("the changes sum to %d, the totals changed by %d (%+v)", sums[key], d.NewNetTotal-d.OldNetTotal, d)
	}
	if len(added) != 1 || added[0].RecordID != "late-record" || added[0].NewGross != 500 || added[0].Seq != 2001 {
		t.Errorf("added %+v, want late-record at seq 2001 with gross 500", added)
	}
	if cols := added[0].Columns(); cols[2] != "" || cols[4] != "" || cols[5] != "500" {
		t.Errorf("added record's columns %q, want empty old ones", cols)
	}
}
