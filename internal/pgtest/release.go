package pgtest

import (
	"context"
	"io/fs"
	"os"
	"testing"
	"testing/fstest"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/migrate"
)

// Migrations is a migration set's files as an earlier release shipped
// them: the set's name (as schema.NewSet gives it: "core", "pricing") and
// the directory of its .sql files.
type Migrations struct{ Set, Dir string }

// MigrateBefore lays out an earlier release's database for an upgrade
// test: in schema baton of db (created if missing), each of sets' files
// whose name sorts before version, in order, recorded in the set's
// migrations table as schema.Migrate records them, so that schema.Migrate
// applies the rest.
func MigrateBefore(t testing.TB, db *bun.DB, version string, sets ...Migrations) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS baton`); err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		files := fstest.MapFS{}
		entries, err := os.ReadDir(s.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() >= version {
				continue
			}
			data, err := fs.ReadFile(os.DirFS(s.Dir), e.Name())
			if err != nil {
				t.Fatal(err)
			}
			files[e.Name()] = &fstest.MapFile{Data: data}
		}
		ms := migrate.NewMigrations()
		if err := ms.Discover(files); err != nil {
			t.Fatalf("migrations of set %s in %s: %v", s.Set, s.Dir, err)
		}
		m := migrate.NewMigrator(db, ms,
			migrate.WithTableName(`"baton".`+s.Set+"_migrations"),
			migrate.WithLocksTableName(`"baton".`+s.Set+"_migration_locks"),
			migrate.WithTemplateData(struct{ Schema string }{`"baton"`}),
			migrate.WithMarkAppliedOnSuccess(true))
		if err := m.Init(ctx); err != nil {
			t.Fatalf("migrations of set %s: %v", s.Set, err)
		}
		if _, err := m.Migrate(ctx); err != nil {
			t.Fatalf("applying set %s before %s: %v", s.Set, version, err)
		}
	}
}
