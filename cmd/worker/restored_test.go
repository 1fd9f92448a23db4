package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/internal/pglocal"
)

// debian15 is where Debian keeps PostgreSQL 15, the major the whole suite
// runs on, with its client tools.
const debian15 = "/usr/lib/postgresql/15/bin"

// A database migrated and loaded on PostgreSQL 15 and moved to the newer
// major the tests run on (BATON_PG_VERSION=16, 17 or 18) by dump and
// restore is current for worker migrate, and the workers price it to the
// golden vectors there. It is moved with 15's pg_dump and pg_restore: the
// newer builds have no client tools, so an in-place pg_upgrade (which
// must be the new major's) is not tested. The dump leaves out the columns'
// TOAST compression (pruned_chunks asks for lz4 where the server has it):
// the newer builds have no lz4, and a restore naming it would fail.
func TestDatabaseFrom15RestoredOnANewerMajor(t *testing.T) {
	t.Parallel()
	if os.Getenv("TEST_DATABASE_URL") != "" {
		t.Skip("needs private servers (TEST_DATABASE_URL is set)")
	}
	newBin, err := pglocal.BinDir()
	if err != nil {
		t.Skipf("needs the PostgreSQL server binaries: %v", err)
	}
	if major, err := pglocal.BinMajor(newBin); err != nil || major <= 15 {
		t.Skipf("the tests run on PostgreSQL %d (%v): set BATON_PG_VERSION to a newer major (make test-pg PG=17)", major, err)
	}
	for _, tool := range []string{"postgres", "pg_dump", "pg_restore"} {
		if _, err := os.Stat(filepath.Join(debian15, tool)); err != nil {
			t.Skipf("needs PostgreSQL 15's %s in %s", tool, debian15)
		}
	}
	ctx := context.Background()
	base, err := os.MkdirTemp("", "baton-restored-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(name, bindir string) *pglocal.Server {
		t.Helper()
		srv, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(base, name), BinDir: bindir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Stop(pglocal.Immediate) })
		conn, err := pgx.Connect(ctx, srv.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE DATABASE baton"); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	newer := start("newer", newBin)
	old := start("15", debian15)

	c15 := cli{t, old.URL("baton")}
	c15.mustRun("migrate")
	c15.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	dump := filepath.Join(base, "baton.dump")
	if out, err := exec.Command(filepath.Join(debian15, "pg_dump"), "-Fc", "--no-toast-compression", "-f", dump, "-d", old.URL("baton")).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump on 15: %v\n%s", err, out)
	}
	old.Stop(pglocal.Fast)
	if out, err := exec.Command(filepath.Join(debian15, "pg_restore"), "--exit-on-error", "-d", newer.URL("baton"), dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore into PostgreSQL %d: %v\n%s", newer.Major(), err, out)
	}

	c := cli{t, newer.URL("baton")}
	if out := c.mustRun("migrate"); !strings.Contains(out, "schema is up to date") {
		t.Fatalf("worker migrate on the restored database: %q, want it up to date", out)
	}
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s", "--batch-size", "50")
	want, err := os.ReadFile(vectors + "expected.csv")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.mustRun("export", "--out", "-"); got != string(want) {
		t.Errorf("export on PostgreSQL %d differs from the golden vectors:\n%s", newer.Major(), firstDiff(got, string(want)))
	}
	var status struct {
		Totals map[string]any `json:"totals"`
	}
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &status); err != nil {
		t.Fatal(err)
	}
	if status.Totals["processed"] != float64(3544) || status.Totals["pending"] != float64(0) {
		t.Fatalf("status totals on PostgreSQL %d: %v, want 3544 processed, 0 pending", newer.Major(), status.Totals)
	}
}
