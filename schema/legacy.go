package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/migrate"
)

// legacyMigration is the name under which releases without a schema of
// their own recorded their only migration in bun_migrations.
const legacyMigration = "20261122000001"

// legacyTables are the tables those releases created, with columns that
// identify them as baton's, and the name of the set whose first migration
// creates them now (those releases were the pricing worker's, whose set is
// pricingschema.Set).
var legacyTables = []struct {
	name    string
	set     string
	columns []string
}{
	{"tasks", "core", []string{"partition_key", "version", "owner", "lease_expires_at", "available", "position", "checkpoint", "failed_at"}},
	{"workers", "core", []string{"instance_id", "name", "heartbeat_at", "expires_at", "stopped_at"}},
	{"contracts", "pricing", []string{"contract_id", "created_at"}},
	{"tiers", "pricing", []string{"contract_id", "threshold_minor", "discount_bp"}},
	{"loads", "pricing", []string{"load_id", "tiers_file", "records_file", "records_accepted"}},
	{"records", "pricing", []string{"contract_id", "seq", "record_id", "amount_minor", "load_id"}},
	{"priced", "pricing", []string{"contract_id", "seq", "record_id", "gross_minor", "discount_minor", "net_minor", "claim_version", "priced_by"}},
}

// legacySets returns, in order, the sets among sets whose first migration
// creates the legacy tables, or an error naming a set the upgrade needs but
// sets lacks: moving part of an earlier release's tables would strand the
// rest.
func legacySets(sets []*Set) ([]*Set, error) {
	var out []*Set
	for _, t := range legacyTables {
		if len(out) > 0 && out[len(out)-1].name == t.set {
			continue
		}
		i := slices.IndexFunc(sets, func(s *Set) bool { return s.name == t.set })
		if i < 0 {
			return nil, fmt.Errorf("upgrading the database of an earlier release: its tables include the %s set's (%s); migrate with that set as well", t.set, t.name)
		}
		out = append(out, sets[i])
	}
	return out, nil
}

// upgradeLegacy moves a database created by a release without its own
// schema into target (see Migrate) and returns what it did, or nothing if
// the database is not such a one. Callers hold the migration lock.
func upgradeLegacy(ctx context.Context, db *bun.DB, target string, sets []*Set) ([]string, error) {
	// Already upgraded, or created with a schema: nothing to adopt.
	var done sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT to_regclass(?)::text", Core.table(target)).Scan(&done); err != nil {
		return nil, fmt.Errorf("looking for the core migration table: %w", err)
	}
	if done.Valid {
		return nil, nil
	}
	// Old releases named everything unqualified: their tables are in the
	// schema where the search path finds bun_migrations.
	var legacy sql.NullString
	if err := db.QueryRowContext(ctx, `
		SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass('bun_migrations')`).Scan(&legacy); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("looking for a database from an earlier release: %w", err)
	}
	if !legacy.Valid {
		return nil, nil
	}
	from := legacy.String
	var recorded bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+Ident(from)+`.bun_migrations WHERE name = ?)`,
		legacyMigration).Scan(&recorded); err != nil {
		return nil, fmt.Errorf("looking for baton's migration in %s.bun_migrations: %w", Ident(from), err)
	}
	if !recorded {
		return nil, nil // a host's bun_migrations, not baton's
	}
	adopting, err := legacySets(sets)
	if err != nil {
		return nil, err
	}
	for i, t := range legacyTables {
		missing, err := missingColumns(ctx, db, from, t.name, t.columns)
		if err != nil {
			return nil, err
		}
		if i == 0 && len(missing) > 0 {
			// The name alone is not proof: without baton's task table,
			// this is somebody else's migration of the same name.
			return nil, nil
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("upgrading the database of an earlier release: %s.bun_migrations records baton's migration %s and %s.tasks is baton's, but %s.%s lacks column(s) %s; refusing to move anything",
				Ident(from), legacyMigration, Ident(from), Ident(from), t.name, strings.Join(missing, ", "))
		}
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("upgrading the database of an earlier release: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var did []string
	for _, t := range legacyTables {
		if from == target {
			break
		}
		if _, err := tx.ExecContext(ctx, "ALTER TABLE "+Ident(from)+"."+t.name+" SET SCHEMA "+Ident(target)); err != nil {
			return nil, fmt.Errorf("moving %s.%s into schema %s: %w", Ident(from), t.name, Ident(target), err)
		}
	}
	for _, set := range adopting {
		if _, err := tx.NewCreateTable().Model((*migrate.Migration)(nil)).ModelTableExpr(set.table(target)).
			IfNotExists().Exec(ctx); err != nil {
			return nil, fmt.Errorf("creating the %s migration table: %w", set.name, err)
		}
		ms, err := set.migrations()
		if err != nil {
			return nil, err
		}
		first := ms.Sorted()[0]
		if first.Name != legacyMigration {
			return nil, fmt.Errorf("%s migrations start with %s, not %s", set.name, first.Name, legacyMigration)
		}
		mark := &migrate.Migration{Name: first.Name, GroupID: 1}
		if _, err := tx.NewInsert().Model(mark).ModelTableExpr(set.table(target)).Exec(ctx); err != nil {
			return nil, fmt.Errorf("recording the %s migration %s: %w", set.name, first.Name, err)
		}
		did = append(did, set.name+"/"+first.String()+" (moved from "+from+")")
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+Ident(from)+`.bun_migrations WHERE name = ?`, legacyMigration); err != nil {
		return nil, fmt.Errorf("removing baton's migration from %s.bun_migrations: %w", Ident(from), err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("upgrading the database of an earlier release: %w", err)
	}
	return did, nil
}

// missingColumns lists which of columns table schemaName.name lacks (all of
// them if there is no such table).
func missingColumns(ctx context.Context, db *bun.DB, schemaName, name string, columns []string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `
		SELECT column_name::text FROM information_schema.columns
		WHERE table_schema = ? AND table_name = ?`, schemaName, name)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s.%s: %w", Ident(schemaName), name, err)
	}
	defer rows.Close()
	var have []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("reading the columns of %s.%s: %w", Ident(schemaName), name, err)
		}
		have = append(have, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the columns of %s.%s: %w", Ident(schemaName), name, err)
	}
	var missing []string
	for _, c := range columns {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	return missing, nil
}
