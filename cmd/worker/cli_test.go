package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/report"
)

// writeFile writes content to name in a new temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every row of the README's exit-code table, with the cases it names.
func TestExitCodesMatchTheREADMETable(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	dir := t.TempDir()
	badTiers := writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nok,0,100\nbad,0,10001\n")
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	quarantined := cli{t, pgtest.NewURL(t)}
	quarantined.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	db := pgtest.Open(t, quarantined.dsn, dbconn.Options{})
	if _, err := db.Exec(`UPDATE baton.tasks SET failed_at = now(), lease_expires_at = 'infinity', attempts = 5, last_error = 'test'
		WHERE partition_key = (SELECT min(partition_key) FROM baton.tasks)`); err != nil {
		t.Fatal(err)
	}
	unreachable := cli{t, "postgres://baton@127.0.0.1:1/nowhere?connect_timeout=1"}
	noDB := cli{t, ""}
	malformed := cli{t, "postgres://baton@127.0.0.1:notaport/x"}
	fast := []string{"--heartbeat", "100ms", "--stale-after", "1s"}

	cases := []struct {
		code int
		name string
		c    cli
		args []string
		want string // in stderr
	}{
		{0, "success", c, []string{"status"}, ""},
		{0, "help", c, []string{"run", "--help"}, ""},
		{1, "database unreachable", unreachable, []string{"status"}, "connecting to"},
		{1, "run: database unreachable, no wait", unreachable, []string{"run", "--wait-for-database", "0"}, "connecting to"},
		{2, "no command", c, nil, "a command is required"},
		{2, "unknown command", c, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{2, "unknown flag", c, []string{"status", "--frobnicate"}, "--frobnicate"},
		{2, "extra argument", c, []string{"status", "extra"}, "extra"},
		{2, "retry without arguments", c, []string{"retry"}, "retry"},
		{2, "probe without arguments", c, []string{"probe"}, "probe"},
		{2, "zero max-partitions", c, []string{"run", "--max-partitions", "0"}, "--max-partitions must be greater than zero"},
		{2, "zero batch-size", c, []string{"run", "--batch-size", "0"}, "--batch-size must be greater than zero"},
		{2, "zero claim-group", c, []string{"run", "--claim-group", "0"}, "--claim-group must be greater than zero"},
		{2, "zero heartbeat", c, []string{"run", "--heartbeat", "0s"}, "--heartbeat must be greater than zero"},
		{2, "negative heartbeat", c, []string{"run", "--heartbeat", "-1s"}, "--heartbeat must be greater than zero"},
		{2, "zero confirm", c, []string{"run", "--confirm", "0"}, "--confirm must be greater than zero"},
		{2, "zero max-attempts", c, []string{"run", "--max-attempts", "0"}, "--max-attempts must be greater than zero"},
		{2, "negative max-errors", c, []string{"load", "--tiers", vectors + "tiers.csv", "--max-errors", "-1"}, "--max-errors must not be negative"},
		{2, "zero interval", c, []string{"status", "--watch", "--interval", "0s"}, "--interval must be greater than zero"},
		{2, "zero demo workers", c, []string{"demo", "--workers", "0"}, "--workers must be greater than zero"},
		{2, "zero seed contracts", c, []string{"seed", "--contracts", "0", "--dir", dir}, "--contracts must be greater than zero"},
		{2, "stale-after below 3 heartbeats", c, []string{"run", "--heartbeat", "1s", "--stale-after", "2s"}, "stale-after"},
		{2, "missing input file", c, []string{"load", "--records", filepath.Join(dir, "missing.csv")}, "no such file"},
		{2, "directory output", c, []string{"export", "--out", dir}, "is a directory"},
		{2, "no database URL", noDB, []string{"status"}, "DATABASE_URL"},
		{2, "malformed database URL", malformed, []string{"status"}, "parsing database URL"},
		{2, "bad log format", c, []string{"status", "--log-format", "xml"}, "--log-format"},
		{3, "invalid input", c, []string{"load", "--tiers", badTiers}, badTiers + ":3:"},
		{4, "quarantined work left", quarantined, append([]string{"run", "--until-done"}, fast...), "quarantined"},
		{4, "export --complete with unpriced records", quarantined, []string{"export", "--complete", "--out", filepath.Join(dir, "x.csv")}, "not priced"},
		{5, "retry of no such contract", c, []string{"retry", "nosuch"}, "no such contract: nosuch"},
		{5, "trigger of no such job", c, []string{"schedule", "trigger", "nosuch"}, "no such job nosuch"},
		{5, "removal of no such job", c, []string{"schedule", "remove", "nosuch"}, "no such job nosuch"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d %s", tc.code, tc.name), func(t *testing.T) {
			tc.c.t = t
			out, errs, code := tc.c.run(tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("worker %s: exit %d, want %d with %q in stderr\nstdout: %s\nstderr: %s",
					strings.Join(tc.args, " "), code, tc.code, tc.want, out, errs)
			}
			for _, internal := range []string{"MaxListed", "poll and rebalance", "panic", "goroutine"} {
				if strings.Contains(errs, internal) {
					t.Fatalf("internal wording %q reaches the user:\n%s", internal, errs)
				}
			}
		})
	}
}

// A database URL with a password, malformed or unreachable, in the
// environment or as a flag, in text and JSON logs: no command prints the
// password.
func TestPasswordNeverPrintedByAnyCommand(t *testing.T) {
	t.Parallel()
	const secret = "S3CRET-pw"
	tiers := writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nc1,0,100\n")
	records := writeFile(t, "records.csv", "contract_id,record_id,amount_minor\nc1,r1,100\n")
	args := map[string][]string{
		"load":   {"--tiers", tiers, "--records", records},
		"run":    {"--until-done", "--wait-for-database", "0"},
		"export": {"--out", filepath.Join(t.TempDir(), "out.csv")},
		"retry":  {"c1"},
		"seed":   {"--contracts", "1", "--records-per-contract", "1", "--dir", t.TempDir(), "--load"},
		"demo":   {"--contracts", "1", "--records-per-contract", "1"},
		"probe":  {"http://baton:" + secret + "@127.0.0.1:1/readyz"},
		"status": {},
	}
	root, _ := newRoot()
	dsns := []string{
		"postgres://baton:" + secret + "@127.0.0.1:notaport/x",
		"postgres://baton:" + secret + "@127.0.0.1:1/x?connect_timeout=1",
		"postgresql://baton:" + secret + "@[::1/x",
		"host=127.0.0.1 port=notaport user=baton password=" + secret,
		"host=127.0.0.1 port=1 user=baton password='" + secret + "' connect_timeout=1",
	}
	for _, cmd := range root.Commands() {
		name := cmd.Name()
		if name == "help" || name == "completion" {
			continue
		}
		for _, format := range []string{"text", "json"} {
			for i, dsn := range dsns {
				for _, viaFlag := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%s/dsn%d/flag=%v", name, format, i, viaFlag), func(t *testing.T) {
						c := cli{t, dsn}
						a := append([]string{name, "--log-format", format}, args[name]...)
						if viaFlag {
							c.dsn = ""
							a = append(a, "--database-url", dsn)
						}
						out, errs, code := c.run(a...)
						if strings.Contains(out+errs, secret) {
							t.Fatalf("worker %s printed the password (exit %d):\n%s%s", strings.Join(a, " "), code, out, errs)
						}
						if code == 0 && name != "seed" {
							t.Fatalf("worker %s succeeded without a database:\n%s%s", strings.Join(a, " "), out, errs)
						}
					})
				}
			}
		}
	}
}

// export says how many records are unpriced (or fails with --complete),
// writes files with the umask's permissions, and a load strips a BOM.
func TestExportWarnsOnUnpricedAndHonoursTheUmask(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	tiers, err := os.ReadFile(vectors + "tiers.csv")
	if err != nil {
		t.Fatal(err)
	}
	c.mustRun("load", "--tiers", writeFile(t, "tiers.csv", "\uFEFF"+string(tiers)), "--records", vectors+"records.csv")
	out := filepath.Join(t.TempDir(), "priced.csv")
	cmd := c.command("export", "--out", out)
	cmd.Env = append(cmd.Env, "BATON_TEST_UMASK=027")
	got, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "warning: 3544 records are not priced yet") {
		t.Fatalf("export of unpriced records: %v\n%s", err, got)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v under umask 027, want -rw-r-----", st.Mode().Perm())
	}
	if _, errs, code := c.run("export", "--complete", "--out", out); code != clienv.ExitIncomplete || !strings.Contains(errs, "3544 records are not priced yet") {
		t.Fatalf("export --complete: exit %d\n%s", code, errs)
	}
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	if _, errs, code := c.run("export", "--complete", "--out", out); code != 0 || strings.Contains(errs, "warning") {
		t.Fatalf("export --complete after pricing: exit %d\n%s", code, errs)
	}
}

// Every command's help shows an example, and the root's and status's help
// document the exit codes (status's also the states).
func TestEveryCommandHasAnExample(t *testing.T) {
	root, _ := newRoot()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() != "help" && c.Name() != "completion" && strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s --help has no example", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	status, _, err := root.Find([]string{"status"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Exit codes:", "quarantined", "caught_up", "backoff", "stale", "pending", "done", "active"} {
		if !strings.Contains(status.Long, want) {
			t.Errorf("status --help lacks %q", want)
		}
	}
	if !strings.Contains(root.Long, "Exit codes:") {
		t.Error("worker --help lacks the exit codes")
	}
}

// status shows a taken-over contract as confirming until its first batch,
// and counts only live leases for workers.
func TestStatusShowsConfirmingAndLiveLeases(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	var key string
	var version int64
	if err := db.QueryRow(`UPDATE baton.tasks SET owner = 'new#1', version = version + 1, heartbeat_at = now(),
			lease_expires_at = now() + interval '1 hour'
		WHERE partition_key = (SELECT min(partition_key) FROM baton.tasks) RETURNING partition_key, version`).Scan(&key, &version); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO baton.events (task_kind, partition_key, kind, version, worker, prev_owner) VALUES ('pricing', ?, 'takeover', ?, 'new#1', 'old#1');
		INSERT INTO baton.workers (kind, instance_id, name, hostname, pid, mode, heartbeat_at, expires_at)
		VALUES ('pricing', 'new#1', 'new', 'h', 1, 'lock', now(), now() + interval '1 hour')`, key, version); err != nil {
		t.Fatal(err)
	}
	state := func() (string, int) {
		var s report.Status
		if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &s); err != nil {
			t.Fatal(err)
		}
		held := -1
		for _, w := range s.Workers {
			if w.ID == "new#1" {
				held = w.Held
			}
		}
		for _, p := range s.Partitions {
			if p.ContractID == key {
				return p.State, held
			}
		}
		t.Fatalf("%s missing from status", key)
		return "", 0
	}
	if st, held := state(); st != "confirming" || held != 1 {
		t.Fatalf("taken over, before its first batch: %s with %d held, want confirming with 1", st, held)
	}
	if _, err := db.Exec(`INSERT INTO baton.events (task_kind, partition_key, kind, version, worker) VALUES ('pricing', ?, 'first_batch', ?, 'new#1')`, key, version); err != nil {
		t.Fatal(err)
	}
	if st, _ := state(); st != "active" {
		t.Fatalf("after its first batch: %s, want active", st)
	}
	// A lease that expired is not counted for its worker.
	if _, err := db.Exec(`UPDATE baton.tasks SET lease_expires_at = now() - interval '1 second' WHERE partition_key = ?`, key); err != nil {
		t.Fatal(err)
	}
	if st, held := state(); st != "stale" || held != 0 {
		t.Fatalf("expired lease: %s with %d held, want stale with 0", st, held)
	}
	plain := c.mustRun("status")
	if strings.Contains(plain, "map[") || !strings.Contains(plain, "by state: ") {
		t.Fatalf("plain status is not a readable table:\n%s", plain)
	}
}
