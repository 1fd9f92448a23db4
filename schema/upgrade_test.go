package schema_test

import (
	"bytes"
	"context"
	_ "embed"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/batonhq/baton/pricing/pricingschema"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/migrate"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/schema"
)

// legacyInit is the only migration of the releases that kept baton's tables
// in the search path's schema, exactly as they shipped it.
//
//go:embed testdata/legacy_20261122000001_init.sql
var legacyInit []byte

// migrateLegacy lays out a database as those releases did: their migration
// applied by bun's migrator with its defaults (bun_migrations in public),
// beside a host's own migration recorded in the same table.
func migrateLegacy(t *testing.T, db *bun.DB) {
	t.Helper()
	ctx := context.Background()
	ms := migrate.NewMigrations()
	if err := ms.Discover(fstest.MapFS{
		"20261122000001_init.tx.up.sql": {Data: legacyInit},
		"20240101000000_host.up.sql":    {Data: []byte(`CREATE TABLE host_orders (id serial PRIMARY KEY); INSERT INTO host_orders DEFAULT VALUES;`)},
	}); err != nil {
		t.Fatal(err)
	}
	m := migrate.NewMigrator(db, ms, migrate.WithMarkAppliedOnSuccess(true))
	if err := m.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
}

var quiet = slog.New(slog.DiscardHandler)

var allSets = schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}}

type pricedRow struct {
	Contract, Record, PricedBy string
	Seq, ClaimVersion, Net     int64
	PricedAt                   time.Time
}

func pricedRows(t *testing.T, db *bun.DB, table string) map[[2]any]pricedRow {
	t.Helper()
	rows, err := db.Query(`SELECT contract_id, seq, record_id, priced_by, claim_version, net_minor, priced_at FROM ` + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[[2]any]pricedRow{}
	for rows.Next() {
		var r pricedRow
		if err := rows.Scan(&r.Contract, &r.Seq, &r.Record, &r.PricedBy, &r.ClaimVersion, &r.Net, &r.PricedAt); err != nil {
			t.Fatal(err)
		}
		out[[2]any{r.Contract, r.Seq}] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A database migrated and partly priced by a release without its own
// schema (its migration, exactly as shipped, applied by bun's migrator
// beside a host's) is upgraded by Migrate: its tables move into baton's schema with
// their data, pricing finishes there without re-pricing anything, and the
// export equals the golden vectors. The host's migration and table stay.
func TestUpgradeFromLegacyLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewEmptyURL(t)
	db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 12})

	// Load and price part of the vectors with today's code in a scratch
	// schema, then lay the data out as the earlier release had it: its
	// tables in public, filled with the scratch rows (its columns only),
	// and the scratch schema gone. Today's statements need tables the
	// earlier release did not have, so they cannot run against its layout.
	scratch := schema.Config{Schema: "scratch", Sets: allSets.Sets}
	if _, err := schema.Migrate(ctx, db, scratch); err != nil {
		t.Fatal(err)
	}
	if _, err := ingest.NewStore(db, "scratch").Load(ctx, ingest.Options{
		TiersPath: "../testdata/vectors/tiers.csv", RecordsPath: "../testdata/vectors/records.csv"}); err != nil {
		t.Fatal(err)
	}
	part, cancel := context.WithCancel(ctx)
	var batches atomic.Int64
	d, err := distributor.New(db, pricer.NewStore(db, "scratch").Processor(), distributor.Config{
		Schema: "scratch", Name: "old", Logger: quiet, Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second,
		BatchSize: 7, MaxPartitions: 2,
		OnEvent: func(e distributor.Event) {
			if e.Kind == distributor.EventCheckpoint && batches.Add(1) == 20 {
				cancel()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(part); err != nil {
		t.Fatal(err)
	}
	cancel()
	migrateLegacy(t, db.DB)
	for _, tb := range []string{"contracts", "tiers", "loads", "records", "priced", "tasks", "workers"} {
		if _, err := db.Exec(`DO $$ DECLARE cols text; BEGIN
			SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position) INTO cols
			FROM information_schema.columns WHERE table_schema = 'public' AND table_name = '` + tb + `';
			EXECUTE format('INSERT INTO public.%I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM scratch.%I', '` + tb + `', cols, cols, '` + tb + `');
			END $$`); err != nil {
			t.Fatalf("copying %s into the earlier layout: %v", tb, err)
		}
	}
	if _, err := db.Exec(`SELECT setval('public.loads_load_id_seq', (SELECT max(load_id) FROM public.loads)); DROP SCHEMA scratch CASCADE`); err != nil {
		t.Fatal(err)
	}

	before := pricedRows(t, db.DB, "public.priced")
	var total int
	if err := db.QueryRow(`SELECT count(*) FROM public.records`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if len(before) == 0 || len(before) >= total {
		t.Fatalf("partly priced: %d of %d records priced, want some but not all", len(before), total)
	}
	if err := schema.Check(ctx, db, allSets); err == nil {
		t.Fatal("Check accepted a database in the earlier layout")
	}

	applied, err := schema.Migrate(ctx, db, allSets)
	if err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	if !strings.Contains(strings.Join(applied, " "), "moved from public") {
		t.Errorf("Migrate applied %v, want the move from public reported", applied)
	}
	if err := schema.Check(ctx, db, allSets); err != nil {
		t.Fatalf("Check after upgrade: %v", err)
	}
	var left int
	if err := db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public'
		AND tablename IN ('tasks', 'workers', 'contracts', 'tiers', 'loads', 'records', 'priced')`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d of baton's tables left in public", left)
	}
	var hostRows []string
	if err := db.NewSelect().Column("name").Table("bun_migrations").Order("name").Scan(ctx, &hostRows); err != nil {
		t.Fatal(err)
	}
	if strings.Join(hostRows, ",") != "20240101000000" {
		t.Errorf("public.bun_migrations after upgrade = %v, want the host's migration alone", hostRows)
	}
	var orders int
	if err := db.QueryRow(`SELECT count(*) FROM public.host_orders`).Scan(&orders); err != nil || orders != 1 {
		t.Errorf("host_orders: %d rows, %v", orders, err)
	}
	// A second Migrate finds nothing to do.
	if again, err := schema.Migrate(ctx, db, allSets); err != nil || len(again) != 0 {
		t.Errorf("second Migrate = %v, %v; want nothing applied", again, err)
	}

	d, err = distributor.New(db, pricer.NewStore(db, "").Processor(), distributor.Config{
		Name: "new", Logger: quiet, Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second, UntilDone: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := export.NewStore(db, "").Write(ctx, &out); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../testdata/vectors/expected.csv")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("export after upgrade differs from the golden vectors (%d bytes, want %d)", out.Len(), len(want))
	}
	after := pricedRows(t, db.DB, "baton.priced")
	if len(after) != total {
		t.Errorf("%d records priced after the upgrade, want %d", len(after), total)
	}
	for k, r := range before {
		if a, ok := after[k]; !ok || a != r {
			t.Errorf("priced row %v changed by the upgrade: %+v, then %+v", k, r, a)
		}
	}
}

// A host's bun_migrations with a migration of baton's legacy name, but no
// baton tables, is not mistaken for an earlier release's database.
func TestLegacyNameAloneIsNotAnUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.OpenDB(t, pgtest.NewEmptyURL(t), dbconn.Options{})
	ms := migrate.NewMigrations()
	if err := ms.Discover(fstest.MapFS{
		"20261122000001_tasks.up.sql": {Data: []byte(`CREATE TABLE tasks (id serial PRIMARY KEY, title text); INSERT INTO tasks (title) VALUES ('mine');`)},
	}); err != nil {
		t.Fatal(err)
	}
	host := migrate.NewMigrator(db.DB, ms)
	if err := host.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	applied, err := schema.Migrate(ctx, db, allSets)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(applied, " "), "moved") {
		t.Errorf("Migrate moved a host's tables: %v", applied)
	}
	var title string
	if err := db.QueryRow(`SELECT title FROM public.tasks`).Scan(&title); err != nil || title != "mine" {
		t.Errorf("host's tasks: %q, %v", title, err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM public.bun_migrations WHERE name = '20261122000001'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("host's migration row: %d, %v", n, err)
	}
}

// A database that records baton's legacy migration and has baton's task
// table, but not the rest of its tables, is refused rather than half moved.
func TestLegacyLayoutIncompleteIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.OpenDB(t, pgtest.NewEmptyURL(t), dbconn.Options{})
	migrateLegacy(t, db.DB)
	if _, err := db.Exec(`DROP TABLE public.priced`); err != nil {
		t.Fatal(err)
	}
	_, err := schema.Migrate(ctx, db, allSets)
	if err == nil || !strings.Contains(err.Error(), "priced") {
		t.Fatalf("Migrate = %v, want a refusal naming priced", err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'tasks'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("public.tasks moved after a refusal: %d, %v", n, err)
	}
}

// Upgrading an earlier release's database needs every set its tables
// belong to: migrating it with Core alone (as an embedding service would)
// is refused, naming the missing set, and moves nothing.
func TestLegacyLayoutNeedsEverySet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.OpenDB(t, pgtest.NewEmptyURL(t), dbconn.Options{})
	migrateLegacy(t, db.DB)
	_, err := schema.Migrate(ctx, db, schema.Config{})
	if err == nil || !strings.Contains(err.Error(), "pricing set") {
		t.Fatalf("Migrate with Core alone = %v, want a refusal naming the pricing set", err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('tasks', 'priced')`).Scan(&n); err != nil || n != 2 {
		t.Errorf("public tables moved after a refusal: %d left, %v", n, err)
	}
}
