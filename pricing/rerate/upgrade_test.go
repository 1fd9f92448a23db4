package rerate_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricingschema"
	"github.com/batonhq/baton/pricing/rerate"
	"github.com/batonhq/baton/schema"
)

// generationsMigration is the pricing migration that keeps every
// generation's rows in priced_rows.
const generationsMigration = "20261203000010"

// releaseSets are the migration sets of an earlier release, from this
// package's directory.
var releaseSets = []pgtest.Migrations{
	{Set: "core", Dir: filepath.Join("..", "..", "schema", "migrations", "core")},
	{Set: "pricing", Dir: filepath.Join("..", "pricingschema", "migrations")},
}

// A database of the release that moved rows between priced,
// priced_pending and priced_superseded, with a contract re-priced twice
// (generation 2 from seq 4, generation 3 from seq 6, current) and a fourth
// generation being priced (from seq 8, one row so far), is converted in
// place: every generation's view reads what it read before, the current
// rows are unchanged, and pruning the two superseded generations deletes
// only the rows no kept generation shows.
func TestUpgradeKeepsEveryGenerationsRows(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewEmptyURL(t), dbconn.Options{MaxOpenConns: 2})
	ctx := context.Background()
	pgtest.MigrateBefore(t, db.DB, generationsMigration, releaseSets...)
	for _, q := range []string{
		`INSERT INTO baton.contracts (contract_id, current_generation) VALUES ('acme', 3), ('plain', 1)`,
		`INSERT INTO baton.generations (contract_id, generation, state, from_seq, started_at, finished_at, superseded_at, tiers) VALUES
		   ('acme', 1, 'superseded', 0, now() - interval '3 hours', now() - interval '3 hours', now() - interval '2 hours', '[]'),
		   ('acme', 2, 'superseded', 4, now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour', '[]'),
		   ('acme', 3, 'current', 6, now() - interval '1 hour', now() - interval '1 hour', NULL, '[]'),
		   ('acme', 4, 'pricing', 8, now(), NULL, NULL, '[]')`,
		// The current view: 1–4 of generation 1, 5–6 of 2, 7–10 of 3.
		`INSERT INTO baton.priced (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
		 SELECT 'acme', s, 'r' || s, 1000, 1000 - n, n, 1, 'old#1'
		   FROM generate_series(1, 10) s, LATERAL (SELECT CASE WHEN s <= 4 THEN 100 WHEN s <= 6 THEN 200 ELSE 300 END AS n) x
		 UNION ALL
		 SELECT 'plain', s, 'r' || s, 1000, 0, 1000, 1, 'old#1' FROM generate_series(1, 3) s`,
		// Superseded: generation 1's rows after 4, generation 2's after 6.
		`INSERT INTO baton.priced_superseded (contract_id, generation, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, priced_at)
		 SELECT 'acme', 1, s, 'r' || s, 1000, 900, 100, 1, 'old#1', now() FROM generate_series(5, 10) s
		 UNION ALL
		 SELECT 'acme', 2, s, 'r' || s, 1000, 800, 200, 1, 'old#1', now() FROM generate_series(7, 10) s`,
		`INSERT INTO baton.priced_pending (contract_id, generation, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
		 VALUES ('acme', 4, 9, 'r9', 1000, 600, 400, 1, 'old#1')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := schema.Migrate(ctx, db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}}); err != nil {
		t.Fatal(err)
	}
	net := func(q string) int64 {
		t.Helper()
		var n int64
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	views := map[string]int64{
		`SELECT sum(net_minor) FROM baton.priced WHERE contract_id = 'acme'`:                     4*100 + 2*200 + 4*300,
		`SELECT sum(net_minor) FROM baton.priced WHERE contract_id = 'plain'`:                    3000,
		`SELECT sum(net_minor) FROM baton.priced_generation('acme', 1)`:                          10 * 100,
		`SELECT sum(net_minor) FROM baton.priced_generation('acme', 2)`:                          4*100 + 6*200,
		`SELECT sum(net_minor) FROM baton.priced_generation('acme', 4)`:                          4*100 + 2*200 + 2*300 + 400 + 300,
		`SELECT count(*) FROM baton.priced_rows`:                                                 10 + 6 + 4 + 1 + 3,
		`SELECT count(*) FROM pg_class WHERE relname IN ('priced_pending', 'priced_superseded')`: 0,
	}
	for q, want := range views {
		if got := net(q); got != want {
			t.Errorf("after the upgrade, %s: %d, want %d", q, got, want)
		}
	}
	plan, err := rerate.NewStore(db, "").PrunePlan(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := rerate.NewStore(db, "").Prune(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if plan != p {
		t.Errorf("the dry run planned %+v, the prune did %+v", plan, p)
	}
	// Generation 1's rows 5–10 and generation 2's 7–10 are replaced in
	// generation 3; its rows 1–4 and generation 2's 5–6 stay, shared.
	if p.Generations != 2 || p.Rows != 10 {
		t.Errorf("pruned %+v, want 2 generations and 10 rows", p)
	}
	if got := net(`SELECT sum(net_minor) FROM baton.priced WHERE contract_id = 'acme'`); got != 2000 {
		t.Errorf("current net after pruning: %d, want 2000", got)
	}
	if got := net(`SELECT sum(net_minor) FROM baton.priced_generation('acme', 4)`); got != 2100 {
		t.Errorf("generation 4's net after pruning: %d, want 2100", got)
	}
	gens, err := rerate.NewStore(db, "").List(ctx, []string{"acme"})
	if err != nil {
		t.Fatal(err)
	}
	if len(gens) != 4 || gens[0].State != "pruned" || gens[0].NetTotal != 1000 || gens[1].State != "pruned" || gens[1].NetTotal != 1600 ||
		gens[2].NetTotal != 2000 || gens[3].NetTotal != 2100 {
		t.Errorf("generations after pruning: %+v", gens)
	}
}
