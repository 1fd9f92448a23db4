package main

import (
	"strings"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
)

// A contract or job that does not exist is exit 5, said in the pricing
// CLI's words (contracts, not partitions); a schema that does not exist is
// said to be missing, not outdated.
func TestNotFoundAndMissingSchemaAreSaidPlainly(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	var first string
	if err := db.QueryRow(`UPDATE baton.tasks SET failed_at = now(), lease_expires_at = 'infinity', attempts = 5, last_error = 'test'
		WHERE partition_key = (SELECT min(partition_key) FROM baton.tasks) RETURNING partition_key`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	empty := cli{t, pgtest.NewEmptyURL(t)}
	for _, tc := range []struct {
		name       string
		c          cli
		args       []string
		code       int
		wantErr    string
		wantOut    string
		notWantErr string
	}{
		{"retry nosuch", c, []string{"retry", "nosuch"}, clienv.ExitNotFound, "no such contract: nosuch", "", "partition"},
		// The others are still retried; the missing ones are reported at the end.
		{"retry found and not", c, []string{"retry", "nosuch", first, "gone"}, clienv.ExitNotFound, "no such contract: nosuch, gone",
			first + ": re-enabled", "partition"},
		{"schedule trigger nosuch", c, []string{"schedule", "trigger", "nosuch"}, clienv.ExitNotFound, "no such job nosuch", "", ""},
		{"schedule remove nosuch", c, []string{"schedule", "remove", "nosuch"}, clienv.ExitNotFound, "no such job nosuch", "", ""},
		{"--schema nosuch", c, []string{"status", "--schema", "nosuch"}, clienv.ExitUsage,
			"schema nosuch does not exist: run worker migrate --schema nosuch", "", "older than this binary"},
		{"never migrated", empty, []string{"status"}, clienv.ExitUsage, "schema baton does not exist: run worker migrate", "", "older than this binary"},
		// A worker waits for a database that does not answer (and for a
		// migration under way), not for a schema that does not exist: it
		// fails at once, well before its 5-minute wait.
		{"run --schema nosuch", c, []string{"run", "--schema", "nosuch", "--wait-for-database", "10m"}, clienv.ExitUsage,
			"schema nosuch does not exist: run worker migrate --schema nosuch", "", "waiting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.t = t
			out, errs, code := tc.c.run(tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.wantErr) || !strings.Contains(out, tc.wantOut) ||
				(tc.notWantErr != "" && strings.Contains(errs, tc.notWantErr)) {
				t.Fatalf("worker %s: exit %d, want %d with %q in stderr (and not %q), %q in stdout\nstdout: %s\nstderr: %s",
					strings.Join(tc.args, " "), code, tc.code, tc.wantErr, tc.notWantErr, tc.wantOut, out, errs)
			}
		})
	}
	// Quarantined work left: exit 4, counted in contracts.
	if _, err := db.Exec(`UPDATE baton.tasks SET failed_at = now(), lease_expires_at = 'infinity', attempts = 5, last_error = 'test'
		WHERE partition_key = ?`, first); err != nil {
		t.Fatal(err)
	}
	_, errs, code := c.run("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	last := strings.TrimSpace(errs)
	last = last[strings.LastIndex(last, "\n")+1:]
	if code != clienv.ExitIncomplete || last != "worker: work remains: 1 contract is quarantined; see worker status, then worker retry CONTRACT" {
		t.Fatalf("run --until-done with a quarantined contract: exit %d, last line %q\n%s", code, last, errs)
	}
}
