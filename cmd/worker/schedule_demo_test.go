package main

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/demo"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
)

// userDatabase is a database someone uses: baton's schema with their own
// scheduled jobs (named as the demo's jobs are), contracts with pending
// records, and a table of theirs.
func userDatabase(t *testing.T) (cli, *bun.DB) {
	t.Helper()
	c := cli{t, pgtest.NewURL(t)}
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	c.mustRun("schedule", "add", "tick", "--every", "10s", "--", "sh", "-c", "echo their tick")
	c.mustRun("schedule", "add", "lead", "--every", "1h", "--mode", "leader", "--", "sh", "-c", "echo their lead")
	c.mustRun("seed", "--contracts", "4", "--records-per-contract", "1500", "--dir", t.TempDir(), "--load")
	if _, err := db.Exec(`CREATE TABLE theirs (id int); INSERT INTO theirs SELECT generate_series(1, 100)`); err != nil {
		t.Fatal(err)
	}
	return c, db
}

// databaseContents is every table of the database outside the system
// catalogs, each with its row count and a digest of all its rows.
func databaseContents(t *testing.T, db *bun.DB) map[string]string {
	t.Helper()
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
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	m := map[string]string{}
	for _, tb := range tables {
		var n int64
		var digest string
		if err := db.QueryRow(`SELECT count(*), coalesce(md5(string_agg(t::text, E'\n' ORDER BY t::text)), '')
			FROM `+tb+` t`).Scan(&n, &digest); err != nil {
			t.Fatal(err)
		}
		m[tb] = fmt.Sprintf("%d rows %s", n, digest)
	}
	return m
}

// userJobs lists the jobs: name, schedule, command, next due time, runs.
func userJobs(t *testing.T, db *bun.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT format('%s every_us=%s cron=%s mode=%s command=%s next_run=%s runs=%s version=%s',
			name, every_us, cron, mode, command, next_run, runs, version)
		FROM baton.jobs ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var jobs []string
	for rows.Next() {
		var j string
		if err := rows.Scan(&j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return jobs
}

// userTasks lists the contracts' task rows: owner, version and progress.
func userTasks(t *testing.T, db *bun.DB) string {
	t.Helper()
	var tasks string
	if err := db.QueryRow(`SELECT string_agg(format('%s/%s/%s/%s/%s', partition_key, version, coalesce(owner, '-'), position, available),
		',' ORDER BY partition_key) FROM baton.tasks`).Scan(&tasks); err != nil {
		t.Fatal(err)
	}
	return tasks
}

type userState struct {
	jobs     []string
	tasks    string
	priced   int64
	contents map[string]string
}

func snapshotUser(t *testing.T, db *bun.DB) userState {
	t.Helper()
	s := userState{jobs: userJobs(t, db), tasks: userTasks(t, db), contents: databaseContents(t, db)}
	if err := db.QueryRow(`SELECT count(*) FROM baton.priced`).Scan(&s.priced); err != nil {
		t.Fatal(err)
	}
	return s
}

// checkUntouched fails the test if the user's database differs from
// before, naming what changed.
func checkUntouched(t *testing.T, db *bun.DB, before userState) {
	t.Helper()
	after := snapshotUser(t, db)
	if strings.Join(after.jobs, "\n") != strings.Join(before.jobs, "\n") {
		t.Errorf("the demo changed the user's jobs:\nbefore\n  %s\nafter\n  %s",
			strings.Join(before.jobs, "\n  "), strings.Join(after.jobs, "\n  "))
	}
	if after.priced != before.priced {
		t.Errorf("the demo priced the user's records: %d priced before, %d after", before.priced, after.priced)
	}
	if after.tasks != before.tasks {
		t.Errorf("the demo changed the user's task rows:\nbefore %s\nafter  %s", before.tasks, after.tasks)
	}
	var changed []string
	for tb, v := range before.contents {
		if after.contents[tb] != v {
			changed = append(changed, fmt.Sprintf("%s: %s -> %s", tb, v, after.contents[tb]))
		}
	}
	for tb, v := range after.contents {
		if _, ok := before.contents[tb]; !ok {
			changed = append(changed, fmt.Sprintf("%s: new table, %s", tb, v))
		}
	}
	sort.Strings(changed)
	if len(changed) > 0 {
		t.Errorf("the demo changed tables of the user's database:\n  %s", strings.Join(changed, "\n  "))
	}
}

var scheduleDemoDatabase = regexp.MustCompile(`baton_schedule_demo_[0-9_]+`)

// demoDatabaseIn returns the name of the database of its own that the demo
// says it uses.
func demoDatabaseIn(t *testing.T, out string) string {
	t.Helper()
	name := scheduleDemoDatabase.FindString(out)
	if name == "" || !strings.Contains(out, "database of its own") {
		t.Fatalf("the demo does not say it uses a database of its own:\n%s", out)
	}
	return name
}

func databaseExists(t *testing.T, db *bun.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_database WHERE datname = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// With DATABASE_URL naming a database in use, the schedule demo runs in a
// database of its own on that server and drops it: the user's jobs (one
// named "tick", as the demo's), task rows and pending records stay exactly
// as they were.
func TestScheduleDemoLeavesTheGivenDatabaseAlone(t *testing.T) {
	t.Parallel()
	c, db := userDatabase(t)
	before := snapshotUser(t, db)
	if before.priced != 0 || len(before.jobs) != 2 || before.tasks == "" {
		t.Fatalf("set-up: %d priced, jobs %v, tasks %q", before.priced, before.jobs, before.tasks)
	}
	out, errs, code := c.run("schedule", "demo")
	if code != 0 {
		t.Errorf("schedule demo: exit %d\n%s%s", code, out, errs)
	}
	checkUntouched(t, db, before)
	name := demoDatabaseIn(t, out)
	if databaseExists(t, db, name) || !strings.Contains(out, "dropped the demo's database "+name) {
		t.Errorf("the demo's database %s was not dropped:\n%s", name, out)
	}
	if !strings.Contains(out, "OK: every slot ran") {
		t.Errorf("schedule demo did not verify its runs:\n%s", out)
	}
}

// SIGINT part-way through, with the workers running: either demo stops
// its workers, drops its database and leaves the user's alone.
func TestDemosInterruptedDropTheirDatabase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		prefix string
	}{
		{[]string{"schedule", "demo"}, "baton_schedule_demo_"},
		// Enough records that the workers are still pricing when interrupted.
		{[]string{"demo", "--contracts", "8", "--records-per-contract", "50000", "--kill-at", "0"}, "baton_demo_"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			c, db := userDatabase(t)
			before := snapshotUser(t, db)
			cmd := c.command(tc.args...)
			var out, errs syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &errs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			nameRE := regexp.MustCompile(regexp.QuoteMeta(tc.prefix) + `[0-9_]+`)
			var name string
			testutil.Eventually(t, 60*time.Second, "the demo naming its database and starting workers", func() error {
				select {
				case err := <-done:
					t.Fatalf("the demo ended before the interrupt: %v\n%s%s", err, out.String(), errs.String())
				default:
				}
				if name = nameRE.FindString(out.String()); name == "" || !strings.Contains(out.String(), "database of its own") {
					return fmt.Errorf("no database of its own named in the output yet:\n%s", out.String())
				}
				if !strings.Contains(out.String(), "starting 3 workers") {
					return fmt.Errorf("no workers started yet:\n%s", out.String())
				}
				return nil
			})
			demo := pgtest.Open(t, demo.WithDatabase(c.dsn, name), dbconn.Options{})
			testutil.Eventually(t, 60*time.Second, "the demo's workers registered in its database", func() error {
				var n int
				if err := demo.QueryRow(`SELECT count(*) FROM baton.workers`).Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					return fmt.Errorf("no worker registered")
				}
				return nil
			})
			demo.Close()
			if !databaseExists(t, db, name) {
				t.Fatalf("the demo's database %s does not exist while it runs", name)
			}
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			err := testutil.Receive(t, done, 60*time.Second, "the demo's exit after SIGINT")
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != clienv.ExitFailure || !strings.Contains(errs.String(), "interrupted") {
				t.Errorf("interrupted %s: %v, want exit %d saying it was interrupted\n%s%s",
					strings.Join(tc.args, " "), err, clienv.ExitFailure, out.String(), errs.String())
			}
			if databaseExists(t, db, name) {
				t.Errorf("the interrupted demo left its database %s behind\n%s%s", name, out.String(), errs.String())
			}
			if !strings.Contains(out.String(), "dropped the demo's database "+name) {
				t.Errorf("the interrupted demo does not say it dropped its database:\n%s", out.String())
			}
			checkUntouched(t, db, before)
		})
	}
}
