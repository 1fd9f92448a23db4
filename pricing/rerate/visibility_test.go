package rerate_test

import (
	"context"
	"sort"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/rerate"
)

// viewAgainstFunctionSQL counts the rows in which the priced view and
// priced_generation(contract, current generation) differ, both ways, and
// the view's rows. The rule "a contract's rows are, for each seq, the row
// of its greatest generation <= G" is written in both; they must agree.
const viewAgainstFunctionSQL = `
WITH v AS (SELECT contract_id, seq, generation, record_id, gross_minor, discount_minor, net_minor FROM baton.priced),
     f AS (SELECT p.contract_id, p.seq, p.generation, p.record_id, p.gross_minor, p.discount_minor, p.net_minor
             FROM baton.contracts c, LATERAL baton.priced_generation(c.contract_id, c.current_generation) p)
SELECT (SELECT count(*) FROM (SELECT * FROM v EXCEPT ALL SELECT * FROM f) x),
       (SELECT count(*) FROM (SELECT * FROM f EXCEPT ALL SELECT * FROM v) y),
       (SELECT count(*) FROM v)`

// The priced view and the priced_generation function, the two places the
// generation-visibility rule is written, agree on every contract's current
// rows: after a first pricing, after re-pricings that share a prefix with
// the generation before, and with a generation in flight whose first rows
// are written but not yet current.
func TestPricedViewAgreesWithPricedGeneration(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 4})
	ctx := context.Background()
	loadUndiscounted(t, db)
	agree := func(when string, wantRows int64) {
		t.Helper()
		var onlyView, onlyFunc, rows int64
		if err := db.QueryRowContext(ctx, viewAgainstFunctionSQL).Scan(&onlyView, &onlyFunc, &rows); err != nil {
			t.Fatalf("%s: comparing priced with priced_generation: %v", when, err)
		}
		if onlyView != 0 || onlyFunc != 0 || rows != wantRows {
			t.Fatalf("%s: %d rows only in priced, %d only in priced_generation, %d in priced (want %d)",
				when, onlyView, onlyFunc, rows, wantRows)
		}
	}
	agree("before pricing", 0)
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	agree("after the first pricing", 3544)

	// Every other contract re-priced from its middle record on (same
	// tiers, so the same amounts; the prefix stays generation 1's rows),
	// the others from the start with the golden tiers.
	tiers := vectorTiers(t)
	contracts := make([]string, 0, len(tiers))
	for c := range tiers {
		contracts = append(contracts, c)
	}
	sort.Strings(contracts)
	var reqs []rerate.Request
	for i, c := range contracts {
		r := rerate.Request{Contract: c, Reason: "visibility test", StartedBy: "test"}
		if i%2 == 0 {
			var n int64
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.records WHERE contract_id = ?`, c).Scan(&n); err != nil {
				t.Fatal(err)
			}
			r.From = n / 2
		} else {
			r.NewTiers = tiers[c]
		}
		reqs = append(reqs, r)
	}
	if _, err := start(t, db, reqs); err != nil {
		t.Fatal(err)
	}
	agree("with every contract's new generation started", 3544)
	runUntilDone(t, db, distributor.Config{BatchSize: 61})
	agree("after re-pricing", 3544)
	var shared int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.priced WHERE generation = 1`).Scan(&shared); err != nil {
		t.Fatal(err)
	}
	if shared == 0 {
		t.Fatal("no current row is a generation-1 row: the re-pricings from the middle shared no prefix")
	}

	// A generation in flight: its first rows written (as a batch that
	// committed would), not yet current.
	if _, err := start(t, db, []rerate.Request{{Contract: contracts[0], Reason: "in flight", StartedBy: "test"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `
INSERT INTO baton.priced_rows (contract_id, seq, generation, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, priced_at)
SELECT contract_id, seq, g.generation, record_id, gross_minor, discount_minor, net_minor + 1, claim_version, 'test', now()
  FROM baton.priced p, (SELECT max(generation) AS generation FROM baton.generations WHERE contract_id = ?0) g
 WHERE p.contract_id = ?0 AND p.seq <= 10`, contracts[0]); err != nil {
		t.Fatal(err)
	}
	agree("with a generation in flight", 3544)
}
