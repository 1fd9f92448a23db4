package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/internal/testutil"
)

// holdReport opens a REPEATABLE READ transaction on a connection of its
// own, as a long report does, takes its snapshot with a statement that
// carries a secret in a comment and a literal, and returns the session's
// pid and application name. It is rolled back when the test ends.
func holdReport(t *testing.T, dsn string) (int, string) {
	t.Helper()
	app := fmt.Sprintf("monthly-report-%d", time.Now().UnixNano()%1e9)
	db := pgtest.Open(t, dsn, dbconn.Options{ApplicationName: app, MaxOpenConns: 1})
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	var pid int
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid() /* S3cret */ WHERE 'S3cret' <> ''").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// A transaction id handed out after the snapshot puts its xmin behind.
	if _, err := pgtest.Open(t, dsn, dbconn.Options{MaxOpenConns: 1}).ExecContext(ctx, "SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	return pid, app
}

// status reports a REPEATABLE READ transaction held in another session:
// who (pid, application, state, the query without its secret), and a
// WARNING line once it is older than --horizon-warn-after; none below it.
func TestHorizonStatusReportsAHeldTransaction(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	pid, app := holdReport(t, c.dsn)

	out := c.mustRun("status", "--horizon-warn-after", "1h")
	if !strings.Contains(out, fmt.Sprintf("pid %d application %q", pid, app)) || !strings.Contains(out, "idle in transaction") {
		t.Fatalf("status does not name the holder:\n%s", out)
	}
	if strings.Contains(out, "S3cret") {
		t.Fatalf("status shows the query's secret:\n%s", out)
	}
	if !strings.Contains(out, "dead row versions: ") {
		t.Fatalf("no dead row versions line:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "WARNING") && strings.Contains(line, app) {
			t.Fatalf("warning below the threshold: %s", line)
		}
	}

	testutil.Eventually(t, 20*time.Second, "a warning past a 1ms threshold", func() error {
		out := c.mustRun("status", "--horizon-warn-after", "1ms")
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "WARNING: a transaction open for") && strings.Contains(line, "holds back the xmin horizon") {
				return nil
			}
		}
		return fmt.Errorf("no WARNING line:\n%s", out)
	})

	var s report.Status
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json", "--horizon-warn-after", "1ms")), &s); err != nil {
		t.Fatal(err)
	}
	h := s.Horizon
	if h == nil || !h.Warning || h.OldestAgeMS == nil || h.WarnAfterMS != 1 {
		t.Fatalf("horizon in JSON: %+v", h)
	}
	found := false
	for _, x := range h.Holders {
		if x.PID == pid {
			found = x.ApplicationName == app && x.State == "idle in transaction" && x.AgeMS != nil && x.XIDAge > 0 &&
				strings.HasPrefix(x.Query, "SELECT pg_backend_pid() WHERE '…'")
			if !found {
				t.Fatalf("holder in JSON: %+v", x)
			}
		}
	}
	if !found {
		t.Fatalf("pid %d not among the holders: %+v", pid, h.Holders)
	}
	tables := map[string]bool{}
	for _, tb := range h.Tables {
		tables[tb.Name] = true
	}
	if !tables["tasks"] || !tables["record_chunks"] || !tables["priced_rows"] {
		t.Fatalf("tables: %+v", h.Tables)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &raw); err != nil {
		t.Fatal(err)
	}
	var rawH map[string]any
	if err := json.Unmarshal(raw["horizon"], &rawH); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"oldest_xact_age_ms", "warn_after_ms", "warning", "holders", "dead_rows", "tables"} {
		if _, ok := rawH[k]; !ok {
			t.Fatalf("status --json lacks horizon.%s: %v", k, rawH)
		}
	}
	if rawH["warn_after_ms"] != float64(600000) {
		t.Fatalf("default threshold: %v", rawH["warn_after_ms"])
	}
}

// status --watch, without a terminal, prints the warning under its
// progress line.
func TestHorizonStatusWatchWarns(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	holdReport(t, c.dsn)
	cmd := c.command("status", "--watch", "--interval", "100ms", "--horizon-warn-after", "1ms")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	warned := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "WARNING: a transaction open for") {
				select {
				case warned <- sc.Text():
				default:
				}
			}
		}
	}()
	testutil.Receive(t, warned, 30*time.Second, "status --watch's warning")
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("status --watch: %v\n%s", err, stderr.String())
	}
}
