package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/pricing/pricingschema"
)

// The test binary doubles as the worker binary: with BATON_RUN_AS_WORKER
// set it runs the CLI instead of the tests, so tests start real worker
// processes without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("BATON_RUN_AS_WORKER") == "1" {
		if m, err := strconv.ParseUint(os.Getenv("BATON_TEST_UMASK"), 8, 32); err == nil {
			syscall.Umask(int(m))
		}
		os.Exit(execute(os.Args[1:]))
	}
	pgtest.Main(m, pricingschema.Set)
}

const vectors = "../../testdata/vectors/"

type cli struct {
	t   *testing.T
	dsn string
}

func (c cli) command(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "BATON_RUN_AS_WORKER=1", "DATABASE_URL="+c.dsn)
	return cmd
}

// run runs the CLI to completion and returns stdout, stderr and the exit code.
func (c cli) run(args ...string) (string, string, int) {
	c.t.Helper()
	cmd := c.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func (c cli) mustRun(args ...string) string {
	c.t.Helper()
	out, errs, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("worker %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

func TestWorkersWithOneKilledMatchGoldenVectors(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	db := pgtest.Open(t, c.dsn, dbconn.Options{})

	args := []string{"run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s", "--confirm", "3",
		"--batch-size", "5", "--max-partitions", "3", "--log-format", "json"}
	var procs []*exec.Cmd
	logs := make([]*bytes.Buffer, 3)
	for i := range 3 {
		cmd := c.command(append(args, "--id", "w"+string(rune('1'+i)))...)
		logs[i] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = logs[i], logs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Kill()
		}
	})

	// Kill whichever worker holds a partially priced contract once a
	// tenth of the records are priced.
	victim := -1
	deadline := time.Now().Add(60 * time.Second)
	for victim < 0 {
		if time.Now().After(deadline) {
			t.Fatal("no worker held a partially priced contract in time")
		}
		var owner string
		err := db.QueryRow(`SELECT owner FROM baton.tasks
			WHERE owner IS NOT NULL AND position > 0 AND position < available
			  AND (SELECT sum(position) FROM baton.tasks) > 350
			ORDER BY available - position DESC LIMIT 1`).Scan(&owner)
		if err == nil {
			for i := range procs {
				if strings.HasPrefix(owner, "w"+string(rune('1'+i))+"#") {
					victim = i
				}
			}
		}
		time.Sleep(5 * time.Millisecond) // polling the database for a moment to act on
	}
	if err := procs[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i, p := range procs {
		err := p.Wait()
		if i == victim {
			continue
		}
		if err != nil {
			t.Fatalf("worker w%d: %v\n%s", i+1, err, logs[i])
		}
	}
	var takeovers int
	for i := range procs {
		takeovers += strings.Count(logs[i].String(), `"takeover":true`)
	}
	if takeovers == 0 {
		t.Fatal("no worker took over a partition of the killed one")
	}
	out := filepath.Join(t.TempDir(), "priced.csv")
	c.mustRun("export", "--out", out)
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(vectors + "expected.csv")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("export after a SIGKILL differs from the golden vectors (%d vs %d bytes)", len(got), len(want))
	}
	t.Logf("killed w%d; %d takeovers", victim+1, takeovers)
}

func TestExitCodesAndMessages(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	// Bad configuration is a usage error naming the problem.
	_, errs, code := c.run("run", "--heartbeat", "1s", "--stale-after", "2s")
	if code != clienv.ExitUsage || !strings.Contains(errs, "stale-after") {
		t.Fatalf("bad timings: exit %d, %q", code, errs)
	}
	// Invalid input: exit 3, FILE:LINE: reason, nothing loaded.
	bad := filepath.Join(t.TempDir(), "tiers.csv")
	if err := os.WriteFile(bad, []byte("contract_id,threshold_minor,discount_bp\nok,0,100\nbad,0,10001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code = c.run("load", "--tiers", bad)
	if code != clienv.ExitBadInput || !strings.Contains(errs, bad+":3:") {
		t.Fatalf("invalid tiers: exit %d, %q", code, errs)
	}
	status := c.mustRun("status", "--json")
	var s report.Status
	if err := json.Unmarshal([]byte(status), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Partitions) != 0 {
		t.Fatalf("%d partitions after a failed load, want 0", len(s.Partitions))
	}
	// No database.
	cmd := exec.Command(os.Args[0], "status")
	cmd.Env = append(os.Environ(), "BATON_RUN_AS_WORKER=1", "DATABASE_URL=")
	outb, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != clienv.ExitUsage || !strings.Contains(string(outb), "DATABASE_URL") {
		t.Fatalf("no database: exit %d, %q", cmd.ProcessState.ExitCode(), outb)
	}
}

func TestStatusJSONFieldsAreStable(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	var raw struct {
		Partitions []map[string]any `json:"partitions"`
		Workers    []map[string]any `json:"workers"`
		Totals     map[string]any   `json:"totals"`
	}
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Partitions) != 12 {
		t.Fatalf("%d partitions, want 12 (one per contract)", len(raw.Partitions))
	}
	for _, field := range []string{"contract_id", "owner", "state", "version", "heartbeat_age_ms", "processed", "pending", "attempts", "error"} {
		if _, ok := raw.Partitions[0][field]; !ok {
			t.Errorf("status JSON lacks %q", field)
		}
	}
	if raw.Totals["processed"].(float64) != 3544 || raw.Totals["pending"].(float64) != 0 {
		t.Fatalf("totals %v, want 3544 processed, 0 pending", raw.Totals)
	}
}

// SIGTERM: the worker commits or abandons its batch, releases everything,
// and exits 0; another worker then finishes the job from the checkpoints.
func TestSIGTERMReleasesAndExitsZero(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	dir := t.TempDir()
	c.mustRun("seed", "--contracts", "8", "--records-per-contract", "4000", "--dir", dir, "--load")
	db := pgtest.Open(t, c.dsn, dbconn.Options{})

	cmd := c.command("run", "--id", "leaver", "--heartbeat", "100ms", "--stale-after", "30s", "--batch-size", "20")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var done int64
		if err := db.QueryRow(`SELECT coalesce(sum(position), 0) FROM baton.tasks`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done > 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the database for a moment to act on
	}
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker exited with %v after SIGTERM\n%s", err, logs.String())
	}
	t.Logf("graceful exit took %s", time.Since(sent))
	var held int
	if err := db.QueryRow(`SELECT count(*) FROM baton.tasks WHERE owner IS NOT NULL`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("%d partitions still owned after a graceful stop", held)
	}
	// With a 30s lease, only the release lets the next worker start now.
	start := time.Now()
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "30s")
	if took := time.Since(start); took > 25*time.Second {
		t.Fatalf("the next worker took %s: it waited for leases instead of using the releases", took)
	}
	var mismatches int
	if err := db.QueryRow(`SELECT count(*) FROM baton.records r LEFT JOIN baton.priced p USING (contract_id, seq) WHERE p.seq IS NULL`).Scan(&mismatches); err != nil {
		t.Fatal(err)
	}
	if mismatches != 0 {
		t.Fatalf("%d records unpriced after restart", mismatches)
	}
}

// The demo, against a database full of other data: three worker processes,
// one killed, verified, exit 0, and the database exactly as it was (row
// counts of every table), with the demo's own database dropped.
func TestDemoLeavesTheGivenDatabaseAlone(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	// Someone's baton data, part priced, a stale lease, and a table of theirs.
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	c.mustRun("seed", "--contracts", "5", "--records-per-contract", "100", "--prefix", "demo", "--dir", t.TempDir(), "--load")
	if _, err := db.Exec(`UPDATE baton.tasks SET owner = 'gone#1', version = version + 1, heartbeat_at = now() - interval '1 hour',
			lease_expires_at = now() - interval '1 hour' WHERE partition_key = 'demo00001';
		CREATE TABLE theirs (id int); INSERT INTO theirs SELECT generate_series(1, 1000)`); err != nil {
		t.Fatal(err)
	}
	counts := func() map[string]int64 {
		rows, err := db.Query(`SELECT format('%I.%I', table_schema, table_name) FROM information_schema.tables
			WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		var tables []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, name)
		}
		rows.Close()
		m := map[string]int64{}
		for _, tb := range tables {
			var n int64
			if err := db.QueryRow("SELECT count(*) FROM " + tb).Scan(&n); err != nil {
				t.Fatal(err)
			}
			m[tb] = n
		}
		var tasks string
		if err := db.QueryRow(`SELECT string_agg(format('%s/%s/%s/%s/%s', partition_key, version, coalesce(owner, '-'), position, available), ',' ORDER BY partition_key) FROM baton.tasks`).Scan(&tasks); err != nil {
			t.Fatal(err)
		}
		m["tasks:"+tasks] = 0
		return m
	}
	before := counts()
	out := c.mustRun("demo", "--contracts", "12", "--records-per-contract", "3000", "--kill-at", "0.05")
	for _, want := range []string{"database of its own", "SIGKILL demo-", "first batch by another worker", "verification        OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// Takeover times run from the dead worker's last heartbeat that renewed
	// the lease, so none is below the demo's 1s lease.
	m := regexp.MustCompile(`(\S+) to (\S+) after demo-\d+'s last heartbeat that renewed the lease`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("demo output lacks the takeover times:\n%s", out)
	}
	for _, s := range m[1:] {
		if d, err := time.ParseDuration(s); err != nil || d < time.Second {
			t.Errorf("takeover time %s (%v): below the 1s lease it waited out\n%s", s, err, out)
		}
	}
	after := counts()
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("the demo changed the given database:\nbefore %v\nafter  %v", before, after)
	}
	var left int
	if err := db.QueryRow(`SELECT count(*) FROM pg_database WHERE datname LIKE 'baton\_demo\_%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d demo databases left behind", left)
	}
}
