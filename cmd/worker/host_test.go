package main

import (
	"context"
	"os"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/migrate"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// hostMigrations is a host application's own schema, with the table names
// baton used to take for itself, managed by bun's migrate as a Go service
// would.
var hostMigrations = fstest.MapFS{
	"20240101000000_host.up.sql": {Data: []byte(`
CREATE TABLE tasks (id serial PRIMARY KEY, title text NOT NULL);
CREATE TABLE records (id serial PRIMARY KEY, body text NOT NULL);
CREATE TABLE workers (id serial PRIMARY KEY, name text NOT NULL);
CREATE TABLE priced (sku text PRIMARY KEY, cents integer NOT NULL);
--bun:split
INSERT INTO tasks (title) VALUES ('write the report'), ('review');
--bun:split
INSERT INTO records (body) VALUES ('a'), ('b'), ('c');
--bun:split
INSERT INTO workers (name) VALUES ('alice');
--bun:split
INSERT INTO priced VALUES ('apple', 30);
`)},
	"20240102000000_more.up.sql": {Data: []byte(`ALTER TABLE tasks ADD COLUMN done boolean NOT NULL DEFAULT false;`)},
}

// hostSnapshot is everything of the host's in the public schema: its
// tables and every row of them, bun_migrations included.
func hostSnapshot(t *testing.T, db *bun.DB) map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	snap := map[string]string{}
	for _, tb := range tables {
		var s string
		if err := db.QueryRow(`SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '')
			FROM public.` + tb + ` t`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		snap[tb] = s
	}
	return snap
}

// A host application's database, with its own bun_migrations and its own
// tasks, records, workers and priced, takes baton's whole pipeline, twice
// over in two schemas of baton's, and the host's tables and rows are as
// they were.
func TestHostDatabaseIsUntouched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := cli{t, pgtest.NewEmptyURL(t)}
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	host := migrate.NewMigrator(db, mustMigrations(t))
	if err := host.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	before := hostSnapshot(t, db)
	for _, tb := range []string{"bun_migrations", "tasks", "records", "workers", "priced"} {
		if _, ok := before[tb]; !ok {
			t.Fatalf("host setup lacks table %s: %v", tb, before)
		}
	}
	want, err := os.ReadFile(vectors + "expected.csv")
	if err != nil {
		t.Fatal(err)
	}

	for _, schemaArgs := range [][]string{nil, {"--schema", "billing_jobs"}} {
		run := func(args ...string) string { return c.mustRun(append(slices.Clone(schemaArgs), args...)...) }
		run("migrate")
		run("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
		run("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s", "--batch-size", "50")
		if got := run("export", "--out", "-"); got != string(want) {
			t.Errorf("export with %v differs from the golden vectors:\n%s", schemaArgs, firstDiff(got, string(want)))
		}
	}

	after := hostSnapshot(t, db)
	if len(after) != len(before) {
		t.Errorf("host tables in public changed: %v, then %v", before, after)
	}
	for tb, s := range before {
		if after[tb] != s {
			t.Errorf("host table %s changed: %s, then %s", tb, s, after[tb])
		}
	}
	// The host's migrator still sees exactly its own migrations.
	ms, err := host.MigrationsWithStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms.Unapplied()) != 0 || len(ms.Applied()) != 2 {
		t.Errorf("host migrations after baton's: applied %v, unapplied %v", ms.Applied(), ms.Unapplied())
	}
	missing, err := host.MissingMigrations(ctx)
	if err != nil || len(missing) != 0 {
		t.Errorf("host's bun_migrations has migrations the host does not know: %v, %v", missing, err)
	}
	for _, s := range []string{"baton", "billing_jobs"} {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = ?`, s).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("schema %s has no tables", s)
		}
	}
}

func mustMigrations(t *testing.T) *migrate.Migrations {
	t.Helper()
	ms := migrate.NewMigrations()
	if err := ms.Discover(hostMigrations); err != nil {
		t.Fatal(err)
	}
	return ms
}

// firstDiff shows where two texts part.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-80)
	return "got  …" + got[lo:min(len(got), i+80)] + "\nwant …" + want[lo:min(len(want), i+80)]
}
