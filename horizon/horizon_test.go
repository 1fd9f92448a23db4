package horizon_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestQueryHidesLiteralsAndComments(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"SELECT  1\n FROM t", "SELECT 1 FROM t"},
		{"ALTER ROLE baton PASSWORD 'S3cret'", "ALTER ROLE baton PASSWORD '…'"},
		{"ALTER ROLE baton PASSWORD 'it''s S3cret' VALID UNTIL 'x'", "ALTER ROLE baton PASSWORD '…' VALID UNTIL '…'"},
		{`SELECT E'a\'S3cret', 1`, "SELECT '…', 1"},
		{"SELECT dblink('password=S3cret", "SELECT dblink('…'"},
		{"SELECT $$S3cret$$, $x$S3cret$ $x$ + $1", "SELECT $…$, $…$ + $1"},
		{"SELECT 1 -- S3cret\n, 2 /* S3cret */ FROM \"S3cret\"", "SELECT 1 , 2 FROM \"…\""},
		{"SELECT $tag$S3cret", "SELECT $…$"},
	} {
		if got := horizon.Query(c.in, 200); got != c.want {
			t.Errorf("Query(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(horizon.Query(c.in, 200), "S3cret") {
			t.Errorf("Query(%q) shows the secret", c.in)
		}
	}
	if got := horizon.Query("SELECT abcdefghij", 10); got != "SELECT ab…" {
		t.Errorf("cut: %q", got)
	}
}

// holdSnapshot opens a REPEATABLE READ transaction on its own connection
// that has taken its snapshot, as a long report does, and returns its pid;
// it is rolled back when the test ends.
func holdSnapshot(t *testing.T, dsn, app string) int {
	t.Helper()
	db := pgtest.Open(t, dsn, dbconn.Options{ApplicationName: app, MaxOpenConns: 1})
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	var pid int
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid() /* report with 'S3cret' */ FROM baton.tasks LIMIT 1").Scan(&pid); err != nil && err != sql.ErrNoRows {
		t.Fatal(err)
	}
	if pid == 0 {
		if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
	}
	return pid
}

func TestReadReportsARepeatableReadTransactionAndDeadRows(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewURL(t)
	db := pgtest.Open(t, dsn, dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, kind) SELECT 'p' || i, 'default' FROM generate_series(1, 50) i`); err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("report-%d", time.Now().UnixNano())
	pid := holdSnapshot(t, dsn, app)

	// Dead versions made after the snapshot stay: the held snapshot may
	// still see the old ones.
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET available = available + 1`); err != nil {
		t.Fatal(err)
	}
	find := func(r horizon.Report) *horizon.Holder {
		for i := range r.Holders {
			if r.Holders[i].PID == pid {
				return &r.Holders[i]
			}
		}
		return nil
	}
	// Threshold 1ms: past it as soon as the transaction is a millisecond old.
	testutil.Eventually(t, 20*time.Second, "the held transaction reported, with a warning and dead task rows", func() error {
		r, err := horizon.NewReader(pgtest.Handle(db), "baton").Read(ctx, time.Millisecond)
		if err != nil {
			return err
		}
		h := find(r)
		if h == nil {
			return fmt.Errorf("pid %d not among %+v", pid, r.Holders)
		}
		if h.ApplicationName != app || h.Kind != horizon.KindSession || h.State != "idle in transaction" || h.Since == nil || h.XIDAge <= 0 {
			return fmt.Errorf("holder %+v", *h)
		}
		if strings.Contains(h.Query, "S3cret") || !strings.HasPrefix(h.Query, "SELECT pg_backend_pid()") {
			return fmt.Errorf("query %q", h.Query)
		}
		if !r.Warning || !strings.Contains(r.Reason, "holds back the xmin horizon") {
			return fmt.Errorf("no warning: %+v", r)
		}
		for _, tb := range r.Tables {
			if tb.Name == "tasks" && tb.Dead >= 50 {
				return nil
			}
		}
		return fmt.Errorf("tasks' dead rows not counted yet: %+v", r.Tables)
	})
	// Far below an hour-long threshold: listed, no warning from it.
	r, err := horizon.NewReader(pgtest.Handle(db), "baton").Read(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if find(r) == nil {
		t.Fatalf("pid %d not listed: %+v", pid, r.Holders)
	}
	if r.Warning && strings.Contains(r.Reason, app) {
		t.Fatalf("warning below the threshold: %s", r.Reason)
	}
	// No schema named: baton's default one, as everywhere else.
	r, err = horizon.NewReader(pgtest.Handle(db), "").Read(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(r.Tables, func(tb horizon.Table) bool { return tb.Name == "tasks" }) {
		t.Fatalf("Read with no schema named: tables %+v, want baton's", r.Tables)
	}
}
