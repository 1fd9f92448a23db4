package schema_test

import (
	"context"
	"database/sql"
	"errors"

	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/pricing/pricingschema"

	"golang.org/x/sync/errgroup"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/schema"
)

func TestMain(m *testing.M) { pgtest.Main(m, pricingschema.Set) }

func TestCheckRefusesUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewEmptyURL(t), dbconn.Options{})
	err := schema.Check(context.Background(), db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}})
	if !errors.Is(err, schema.ErrOutdated) {
		t.Fatalf("Check on empty database = %v, want ErrOutdated", err)
	}
	// The schema does not exist at all: a MissingError naming it, still
	// ErrOutdated.
	var missing *schema.MissingError
	if !errors.As(err, &missing) || missing.Schema != schema.Default {
		t.Fatalf("Check on empty database = %v, want a MissingError for %s", err, schema.Default)
	}
	err = schema.Check(context.Background(), db, schema.Config{Schema: "nosuch"})
	if !errors.As(err, &missing) || missing.Schema != "nosuch" || err.Error() != "schema nosuch does not exist: run worker migrate --schema nosuch (or check --schema and $BATON_SCHEMA)" {
		t.Fatalf("Check of schema nosuch = %v, want a MissingError naming it", err)
	}
}

// A schema that exists but lacks migrations is outdated, not missing:
// a migration may be running beside this check.
func TestCheckOutdatedExistingSchemaIsNotMissing(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewEmptyURL(t), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA half"); err != nil {
		t.Fatal(err)
	}
	err := schema.Check(ctx, db, schema.Config{Schema: "half"})
	var missing *schema.MissingError
	if !errors.Is(err, schema.ErrOutdated) || errors.As(err, &missing) {
		t.Fatalf("Check of an empty existing schema = %v, want ErrOutdated and no MissingError", err)
	}
}

// Many workers starting at once against a fresh database must apply each
// migration exactly once and all end up with a current schema.
func TestConcurrentMigrateAppliesOnce(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewEmptyURL(t)
	const n = 8
	applied := make([][]string, n)
	g, ctx := errgroup.WithContext(context.Background())
	for i := range n {
		db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 2})
		g.Go(func() error {
			var err error
			applied[i], err = schema.Migrate(ctx, db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, a := range applied {
		total += len(a)
	}
	db := pgtest.OpenDB(t, dsn, dbconn.Options{})
	st, err := schema.Inspect(context.Background(), db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}})
	if err != nil {
		t.Fatal(err)
	}
	if total != len(st.Applied) || len(st.Applied) == 0 {
		t.Fatalf("migrations applied %d times in total, want each of %d once", total, len(st.Applied))
	}
	if err := schema.Check(context.Background(), db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}}); err != nil {
		t.Fatalf("Check after migrate: %v", err)
	}
	var n2 int
	if err := db.QueryRow("SELECT (SELECT count(*) FROM baton.core_migrations) + (SELECT count(*) FROM baton.pricing_migrations)").Scan(&n2); err != nil {
		t.Fatal(err)
	}
	if n2 != len(st.Applied) {
		t.Fatalf("the migrations tables have %d rows, want %d", n2, len(st.Applied))
	}
}

func TestCheckRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	if _, err := db.Exec("INSERT INTO baton.core_migrations (name, group_id, migrated_at) VALUES ('99990101000000', 99, now())"); err != nil {
		t.Fatal(err)
	}
	if err := schema.Check(context.Background(), db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}}); !errors.Is(err, schema.ErrTooNew) {
		t.Fatalf("Check = %v, want ErrTooNew", err)
	}
}

// Migrating holds a session advisory lock, which a transaction pooler
// would take on one server session and release on another: Migrate refuses
// a handle that goes through one, found by dbconn.Open (behind PgBouncer)
// or described to dbconn.Wrap, and applies nothing.
func TestMigrateRefusesAPooledHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewEmptyURL(t)
	sqldb, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	plain := bun.NewDB(sqldb, pgdialect.New())
	defer plain.Close()
	wrapped, err := dbconn.Wrap(ctx, plain, dbconn.Access{Pooled: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, wrapped, schema.Config{}); !errors.Is(err, schema.ErrPooled) {
		t.Fatalf("Migrate over a handle described as pooled = %v, want ErrPooled", err)
	}

	opened := pgtest.OpenDB(t, pgtest.Bouncer(t, dsn), dbconn.Options{})
	if _, err := schema.Migrate(ctx, opened, schema.Config{}); !errors.Is(err, schema.ErrPooled) {
		t.Fatalf("Migrate over an opened handle behind PgBouncer = %v, want ErrPooled", err)
	}
	var exists bool
	if err := plain.QueryRowContext(ctx, "SELECT to_regclass('baton.tasks') IS NOT NULL").Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Error("a refused migration created baton's tables")
	}
}
