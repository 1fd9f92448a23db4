package pricer_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/pricing/pricingschema"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/schema"
)

// kindsMigration is the core migration that gave task rows a kind: the
// database of a release without kinds has every core and pricing
// migration before it.
const kindsMigration = "20261126000010_task_kinds.tx.up.sql"

// A pricing database of a release without kinds, mid-way (some contracts
// priced in part, one held by a worker), upgraded: its contracts' rows,
// history and workers become kind pricing, a row that is no contract stays
// default, and pricing workers of this release price every record that
// was left, exactly once, resuming from the old checkpoints.
func TestUpgradedPricingDatabaseStaysClaimableByPricingWorkers(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewEmptyURL(t)
	db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 4})
	ctx := context.Background()
	pgtest.MigrateBefore(t, db.DB, kindsMigration[:14],
		pgtest.Migrations{Set: "core", Dir: filepath.Join("..", "..", "schema", "migrations", "core")},
		pgtest.Migrations{Set: "pricing", Dir: filepath.Join("..", "pricingschema", "migrations")})
	st, err := schema.Inspect(ctx, db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}})
	if err != nil || len(st.Pending) < 1 || !strings.Contains(st.Pending[0], kindsMigration[:14]) {
		t.Fatalf("before the upgrade: pending %v, %v; want the kinds migration first (later ones follow)", st.Pending, err)
	}
	// As that release left it: contracts with records, their task rows
	// (one priced in part, one held by a live worker), their history, a
	// registered worker, and a task row of an embedding service.
	for _, q := range []string{
		`INSERT INTO baton.contracts (contract_id) VALUES ('acme'), ('globex')`,
		`INSERT INTO baton.tiers (contract_id, threshold_minor, discount_bp) VALUES ('acme', 0, 100), ('globex', 0, 0)`,
		`INSERT INTO baton.loads (load_id) VALUES (1)`,
		`INSERT INTO baton.record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
		 SELECT c, 1, 40, 1, array_agg('r' || s ORDER BY s), array_agg(1000 + s ORDER BY s)
		 FROM unnest(ARRAY['acme', 'globex']) c, generate_series(1, 40) s GROUP BY c`,
		`INSERT INTO baton.tasks (partition_key, available, position, version, owner, heartbeat_at, lease_expires_at)
		 VALUES ('acme', 40, 0, 0, NULL, NULL, '-infinity'),
		        ('globex', 40, 0, 1, 'old#1', now(), now() + interval '1 hour'),
		        ('wonka', 3, 0, 0, NULL, NULL, '-infinity')`,
		`INSERT INTO baton.events (partition_key, kind, version, worker) VALUES ('globex', 'claimed', 1, 'old#1'), ('wonka', 'retried', 0, NULL)`,
		`INSERT INTO baton.workers (instance_id, name, expires_at) VALUES ('old#1', 'old', now() + interval '1 hour')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The old worker's batch priced globex's first 10 records.
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.priced (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
		SELECT 'globex', s, 'r' || s, 1000 + s, 0, 1000 + s, 1, 'old#1' FROM generate_series(1, 10) s`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET position = 10,
		checkpoint = jsonb_build_object('cum_gross', 10055, 'cum_net', 10055, 'cum_net_exact', '10055.0000')
		WHERE partition_key = 'globex'`); err != nil {
		t.Fatal(err)
	}

	applied, err := schema.Migrate(ctx, db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}})
	if err != nil || len(applied) < 1 || !strings.Contains(applied[0], kindsMigration[:14]) {
		t.Fatalf("upgrade: applied %v, %v; want the kinds migration first", applied, err)
	}
	kinds := func(q string) map[string]string {
		t.Helper()
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		return out
	}
	if got := kinds(`SELECT partition_key, kind FROM baton.tasks`); got["acme"] != pricer.Kind || got["globex"] != pricer.Kind || got["wonka"] != partition.DefaultKind {
		t.Errorf("task kinds after the upgrade: %v; want the contracts' pricing, wonka default", got)
	}
	if got := kinds(`SELECT partition_key, task_kind FROM baton.events`); got["globex"] != pricer.Kind || got["wonka"] != partition.DefaultKind {
		t.Errorf("event kinds after the upgrade: %v", got)
	}
	if got := kinds(`SELECT instance_id, kind FROM baton.workers`); got["old#1"] != pricer.Kind {
		t.Errorf("worker kinds after the upgrade: %v", got)
	}
	// The old worker is gone (its lease ends); two workers of this release
	// take over globex from its checkpoint and price acme.
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET lease_expires_at = now() WHERE partition_key = 'globex';
		UPDATE baton.workers SET expires_at = now()`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		cfg := distributor.Config{Name: "new", Heartbeat: 50 * time.Millisecond, StaleAfter: time.Second, Confirm: 1,
			UntilDone: true, BatchSize: 7, Logger: slog.New(slog.DiscardHandler)}
		wdb := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: cfg.PoolSize()})
		d, err := distributor.New(wdb, pricer.NewStore(wdb, "").Processor(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.Run(ctx) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	sum, err := pricer.NewStore(db, "").Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != 80 || sum.Priced != 80 || len(sum.Mismatches) != 0 {
		t.Errorf("after the upgrade: %d records, %d priced, mismatches %+v; want all 80 priced once", sum.Records, sum.Priced, sum.Mismatches)
	}
	var wonka int64
	if err := db.QueryRowContext(ctx, `SELECT position FROM baton.tasks WHERE partition_key = 'wonka'`).Scan(&wonka); err != nil || wonka != 0 {
		t.Errorf("wonka (kind default) position %d, %v; want it left alone by the pricing workers", wonka, err)
	}
}
